"""Optional cgroup v1 limits per worker: total memory and number of processes.

Rlimits cap each episode process; a worker's cgroup caps the sum over all its episodes,
so many live episodes cannot exhaust the host together, and a fork bomb that got past
the per-episode limits still meets `pids.max`. Groups are created under the trainer's
own group of each controller (so outer limits still apply) and removed when the worker
stops; `sweep` removes the empty groups of trainers that were killed before they could.
Used only where the isolation detection found the controllers writable.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)
ROOT = "/sys/fs/cgroup"
PREFIX = "spade-"  # groups are named spade-<trainer pid>-<serial>


def _own_path(controller: str) -> str:
  with open("/proc/self/cgroup") as f:
    for line in f:
      _, names, path = line.rstrip("\n").split(":", 2)
      if controller in names.split(","):
        return path
  return "/"


def parent_dir(controller: str) -> str:
  """Where this process's groups of `controller` live (under its own group)."""
  return f"{ROOT}/{controller}{_own_path(controller).rstrip('/')}"


def sweep(controllers: tuple) -> None:
  """Removes empty groups whose trainer process is gone (killed without closing its pool)."""
  for controller in controllers:
    try:
      names = [n for n in os.listdir(parent_dir(controller)) if n.startswith(PREFIX)]
    except OSError:
      continue
    for name in names:
      owner = name[len(PREFIX):].split("-")[0]
      if not owner.isdigit() or os.path.exists(f"/proc/{owner}"):
        continue
      try:
        os.rmdir(f"{parent_dir(controller)}/{name}")
      except OSError:  # still has processes: leave it
        pass


def create(name: str, pid: int, controllers: tuple, memory_mb: int, pids_max: int) -> list[str]:
  """Creates one group per controller, sets its limit and moves `pid` into it."""
  settings = {"memory": ("memory.limit_in_bytes", memory_mb << 20), "pids": ("pids.max", pids_max)}
  made = []
  try:
    for controller in controllers:
      path = f"{parent_dir(controller)}/{name}"
      os.mkdir(path)
      made.append(path)
      knob, value = settings[controller]
      with open(f"{path}/{knob}", "w") as f:
        f.write(str(value))
      with open(f"{path}/cgroup.procs", "w") as f:
        f.write(str(pid))
  except OSError as exc:
    log.warning("cgroup %s not set up (%s); relying on rlimits", name, exc)
  return made


def remove(paths: list[str], timeout_s: float = 1.0) -> None:
  """Removes the groups once their processes are gone (dying processes take a moment)."""
  deadline = time.monotonic() + timeout_s
  for path in paths:
    while True:
      try:
        os.rmdir(path)
        break
      except FileNotFoundError:
        break
      except OSError as exc:
        if time.monotonic() > deadline:
          log.warning("cgroup %s not removed: %s", path, exc)
          break
        time.sleep(0.005)
