"""Finds out which isolation layers this host offers and picks the worker's set-up.

The detection runs in a separate throwaway interpreter (the trainer never forks): it tries
each layer in a forked child and reports what worked. `worker_setup` turns the layers and the
configured isolation level into the worker configuration, or refuses:

  strict  PID, network, mount, IPC and UTS namespaces with a private root (as root, or
          inside a user namespace) + rlimits; seccomp and per-episode uids when available.
  basic   separate process + rlimits + no network (a network namespace or the seccomp
          filter that denies sockets); uses every stronger layer that is available.
  none    separate process + rlimits only. Generated code can reach the network and the
          host's files: only for trusted sources. Logged as a loud warning.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pathlib
import platform
import shutil
import subprocess
import sys

from spade_jax.sandbox import jail

log = logging.getLogger(__name__)
LEVELS = ("strict", "basic", "none")
NAMESPACES = ("pid", "net", "mount", "ipc", "uts")

_DETECT = r"""
import json, os, socket, sys, types
jail = types.ModuleType("jail"); exec(sys.stdin.read(), jail.__dict__)
def trial(fn):
  pid = os.fork()
  if pid == 0:
    try:
      fn()
      os._exit(0)
    except BaseException:
      os._exit(1)
  return os.waitpid(pid, 0)[1] == 0
def jailed(user):
  uid, gid = os.getuid(), os.getgid()
  jail.unshare((["user"] if user else []) + NS)
  if user:
    jail.map_user(uid, gid)
  if not trial(lambda: jail.build_root(DIRS, 1)):  # as PID 1 of the new namespace
    raise OSError("cannot build the jailed root")
def seccomp():
  jail.install_seccomp()
  for call in (os.fork, lambda: socket.socket()):
    try:
      call(); os._exit(3)
    except PermissionError:
      pass
NS, DIRS = %r, %r
print(json.dumps({
  "namespaces": trial(lambda: jailed(False)),
  "user_namespaces": trial(lambda: jailed(True)),
  "seccomp": jail.seccomp_supported() and trial(seccomp),
}))
"""


class SandboxUnavailable(RuntimeError):
  """The host lacks the layers the configured isolation level requires."""


@dataclasses.dataclass(frozen=True)
class Layers:
  root: bool
  namespaces: bool  # PID/net/mount/IPC/UTS namespaces + the jailed root, as the current user
  user_namespaces: bool  # the same inside a new user namespace (no root needed)
  seccomp: bool
  cgroup_v1: tuple  # writable cgroup v1 controllers among (memory, pids)
  bubblewrap: bool
  machine: str
  kernel: str

  def describe(self) -> str:
    return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


@functools.lru_cache(maxsize=1)
def detect_layers() -> Layers:
  """Detects the layers once per process (it starts one throwaway interpreter)."""
  source = pathlib.Path(jail.__file__).read_text()
  try:
    code = _DETECT % (list(NAMESPACES), interpreter_dirs())
    out = subprocess.run([interpreter(), "-I", "-S", "-c", code],
                         input=source, capture_output=True, text=True, timeout=30, env={},
                         cwd="/", check=True).stdout
    found = json.loads(out)
  except (subprocess.SubprocessError, ValueError, OSError) as exc:
    log.warning("sandbox layer detection failed (%s): assuming no namespaces and no seccomp", exc)
    found = {"namespaces": False, "user_namespaces": False, "seccomp": False}
  cgroups = tuple(c for c in ("memory", "pids") if os.access(f"/sys/fs/cgroup/{c}", os.W_OK))
  return Layers(root=os.geteuid() == 0, cgroup_v1=cgroups, bubblewrap=bool(shutil.which("bwrap")),
                machine=platform.machine(), kernel=platform.release(), **found)


def interpreter() -> str:
  """The real interpreter binary (not a venv shim): workers run it with -I -S."""
  return os.path.realpath(sys.executable)


def interpreter_dirs() -> list[str]:
  """Directories the jail must show read-only for the interpreter: prefix and stdlib."""
  return sorted({os.path.dirname(os.path.dirname(interpreter())),
                 os.path.dirname(os.path.realpath(os.__file__))})


def worker_setup(isolation: str, layers: Layers) -> dict:
  """Worker set-up for `isolation` on a host with `layers`; raises SandboxUnavailable."""
  if isolation not in LEVELS:
    raise ValueError(f"sandbox isolation must be one of {LEVELS}, got {isolation!r}")
  if layers.namespaces:
    namespaces = list(NAMESPACES)
  elif layers.user_namespaces:
    namespaces = ["user", *NAMESPACES]
  else:
    namespaces = []
  missing = []
  if isolation == "strict" and not namespaces:
    missing.append("PID/network/mount namespaces (needs root or unprivileged user namespaces)")
  if isolation == "basic" and not namespaces and not layers.seccomp:
    missing.append("a network namespace or a seccomp filter to deny sockets")
  if missing:
    raise SandboxUnavailable(
        f"sandbox isolation {isolation!r} needs {'; '.join(missing)}; host offers: "
        f"{layers.describe()}. Set config.sandbox.isolation to a lower level only for "
        "trusted environments.")
  setup = {"namespaces": namespaces, "seccomp": layers.seccomp,
           "drop_uid": layers.root and "user" not in namespaces,
           "cgroups": layers.cgroup_v1 if layers.root else ()}
  if not namespaces:
    log.warning("!!! SANDBOX ISOLATION LOWERED to %r: no namespaces, so generated environments "
                "see the host's files and processes%s. Use trusted sources only. !!!", isolation,
                "" if layers.seccomp else " and can reach the network")
  log.info("sandbox layers: %s; using namespaces=%s seccomp=%s per-episode uid=%s cgroups=%s",
           layers.describe(), namespaces, setup["seccomp"], setup["drop_uid"], setup["cgroups"])
  return setup
