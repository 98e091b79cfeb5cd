"""The aggregate memory cap: the host measures its live episode processes and kills the largest.

Rlimits cap each episode process alone, and a cgroup v1 memory controller (where writable)
caps each worker's sum; this cap needs no cgroup, so on hosts with cgroup v2 only a batch
of episodes, each under its own limit, still cannot exhaust the host together. It counts
anonymous memory (what cannot be reclaimed; file pages such as the interpreter's are page
cache, and the jail's tmpfs is capped by its size).

A check reads each episode's anonymous resident size from its /proc/<pid>/statm (one
small read each, of a file kept open). Pages an episode still shares with its zygote are
counted there once per sharer, so this sum is an upper bound; only when it is over the
budget are the exact proportional sizes (Pss_Anon in smaps_rollup, shared pages split
among their sharers) read, largest episode first, and the largest are killed until the
rest fit. An episode under its share of the budget (budget / live episodes) is never
killed: once every larger one is gone, the rest fit.
"""

from __future__ import annotations

import os
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
CHECK_INTERVAL_S = 0.05  # while the host waits for replies; memory grows only then
DEFAULT_FRACTION = 0.5  # of MemAvailable when the pool starts, when no budget is configured


def default_budget_mb() -> int:
  """DEFAULT_FRACTION of the host's available memory, in MiB."""
  with open("/proc/meminfo") as f:
    for line in f:
      if line.startswith("MemAvailable:"):
        return int(int(line.split()[1]) * DEFAULT_FRACTION) >> 10
  raise OSError("/proc/meminfo has no MemAvailable line")


class Probe:
  """Reads the memory of one episode process, found by its pidfd.

  Its /proc statm file is opened once and re-read in place, which is several times cheaper
  than opening it per check, and stays tied to that process: once the process is gone it
  reads as empty, whoever gets its pid next.
  """

  def __init__(self, pidfd: int):
    self.pid, self.fd = _host_pid(pidfd), -1
    try:
      self.fd = os.open(f"/proc/{self.pid}/statm", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # gone already: it counts nothing
      pass

  def bound(self) -> int:
    """Anonymous resident bytes (statm resident - shared), 0 when the process is gone."""
    try:
      fields = os.pread(self.fd, 256, 0).split()
      return (int(fields[1]) - int(fields[2])) * PAGE
    except (OSError, ValueError, IndexError):
      return 0

  def exact(self) -> int:
    """Proportional anonymous bytes (Pss_Anon), 0 when the process is gone."""
    try:
      with open(f"/proc/{self.pid}/smaps_rollup") as f:
        for line in f:
          if line.startswith("Pss_Anon:"):
            return int(line.split()[1]) << 10
    except (OSError, ValueError):
      pass
    return 0

  def close(self) -> None:
    if self.fd >= 0:
      os.close(self.fd)
      self.fd = -1


def _host_pid(pidfd: int) -> int:
  """The pid (in the host's PID namespace) of the process `pidfd` refers to; -1 when gone."""
  try:
    with open(f"/proc/self/fdinfo/{pidfd}") as f:
      for line in f:
        if line.startswith("Pid:"):
          return int(line.split()[1])
  except (OSError, ValueError):
    pass
  return -1


class MemoryCap:
  """Decides which live episodes to kill so that their anonymous memory fits `budget_mb`."""

  def __init__(self, budget_mb: int):
    self.budget = budget_mb << 20
    self.last_check = -float("inf")

  def due(self) -> bool:
    """Whether CHECK_INTERVAL_S has passed since the last check (cheap: call it every poll)."""
    return time.monotonic() - self.last_check >= CHECK_INTERVAL_S

  def over_budget(self, probes: list[Probe]) -> dict[int, str]:
    """Index in `probes` -> why, for each episode to kill (largest first) until the rest fit."""
    self.last_check = time.monotonic()
    bound = {i: probe.bound() for i, probe in enumerate(probes)}
    total = sum(bound.values())
    if total <= self.budget:
      return {}
    victims = {}
    for i in sorted(bound, key=bound.get, reverse=True):
      exact = probes[i].exact()
      total -= bound[i] - exact
      if total <= self.budget:
        break
      victims[i] = (f"killed by the aggregate memory cap: it held {exact >> 20} MiB, the "
                    f"most of {len(bound)} live episodes holding at most {total >> 20} MiB "
                    f"together (budget {self.budget >> 20} MiB, sandbox.episodes_memory_mb)")
      total -= exact
      if total <= self.budget:
        break
    return victims
