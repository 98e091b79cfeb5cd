"""Host-side handle of one sandbox worker (an `outer` process and its zygote).

The handle starts the worker with a scrubbed environment in its own session, sends it
its configuration, and then asks its zygote to fork episode processes (handing over the
child ends of two fresh pipes with SCM_RIGHTS) and to kill them. `stop` kills the
worker's whole process group; with a PID namespace that takes every process inside
down with the zygote, and `die_with_parent` does the same if the trainer itself dies.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import time

from spade_jax.sandbox import cgroups, contract, isolation, jail, runner, zygote

_SOURCES = {name: pathlib.Path(module.__file__).read_text() for name, module in
            (("jail", jail), ("runner", runner), ("zygote", zygote))}
# The worker's whole command line (what `ps` shows for it and its episodes): it runs the source
# that stdin starts with, after that source's length in bytes on a line of its own.
BOOTSTRAP = "import sys;f=sys.stdin.buffer;exec(f.read(int(f.readline())))"
START_TIMEOUT_S = 10.0
ACK_TIMEOUT_S = 5.0
UID_SPAN = 1 << 12
UID_SLOTS = 16000


def _stdin(source: str, cfg: dict) -> bytes:
  """What BOOTSTRAP reads: the length of `source` in bytes, a newline, `source`; then the
  configuration (JSON) that the zygote reads."""
  code = source.encode()
  return b"%d\n" % len(code) + code + json.dumps(cfg).encode()


class WorkerError(RuntimeError):
  """The worker is gone or does not answer: an infrastructure failure."""


_serial = itertools.count()


def uid_base(slot: int) -> int:
  """The first uid of slot `slot` (0 <= slot < UID_SLOTS): UID_SPAN uids per slot, end to end,
  far above the uids hosts hand out."""
  return (1 << 20) + slot * UID_SPAN


def _uid_base() -> int:
  """A fresh range of uids per worker: a slot by the trainer's pid and the worker's serial."""
  return uid_base((os.getpid() * 256 + next(_serial)) % UID_SLOTS)


class WorkerHandle:
  """One jailed zygote that forks episode processes; see zygote.py for the process tree."""

  def __init__(self, index: int, setup: dict, limits: dict):
    """setup: from isolation.worker_setup; limits: per-episode rlimits, worker cgroup caps."""
    self.index = index
    self.pid_namespace = "pid" in setup["namespaces"]
    self.next_token = 0
    self.live: set[int] = set()
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    cfg = dict(setup, limits=limits, ctrl_fd=child.fileno(), host_pid=os.getpid(),
               jail_source=_SOURCES["jail"], runner_source=_SOURCES["runner"],
               runner_limits={"max_obs_chars": contract.MAX_OBS_CHARS,
                              "max_msg_bytes": contract.MAX_MESSAGE_BYTES},
               preimport=sorted(contract.ALLOWED_IMPORTS), tmp_mb=16,
               extra_dirs=isolation.interpreter_dirs(),
               uid_base=_uid_base() if setup["drop_uid"] else None, uid_span=UID_SPAN,
               scan_strays="pid" in setup["namespaces"] and not setup["seccomp"],
               private_mounts="mount" in setup["namespaces"])
    try:
      self.proc = subprocess.Popen(
          [isolation.interpreter(), "-I", "-S", "-c", BOOTSTRAP], stdin=subprocess.PIPE,
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(child.fileno(),),
          start_new_session=True, env={}, cwd="/")
    except OSError as exc:
      host.close()
      raise WorkerError(f"worker {index} could not be started: {exc}") from None
    finally:
      child.close()
    self.ctrl = host
    # The worker waits for its configuration, so it has not forked yet: no race.
    self.cgroups = cgroups.create(f"{cgroups.PREFIX}{os.getpid()}-{next(_serial)}", self.proc.pid,
                                  setup["cgroups"], limits["worker_memory_mb"],
                                  limits["worker_pids"])
    try:
      self.proc.stdin.write(_stdin(_SOURCES["zygote"], cfg))
      self.proc.stdin.close()
    except OSError as exc:
      self.stop()
      raise WorkerError(f"worker {index} did not start: {exc}") from None

  def wait_ready(self) -> None:
    """Waits for the zygote's ready message (so several workers can start at once)."""
    try:
      ready, _ = self._recv(START_TIMEOUT_S)
    except (OSError, ValueError, WorkerError) as exc:
      self.stop()
      raise WorkerError(f"worker {self.index} did not start: {exc}") from None
    if not ready.get("ready"):
      self.stop()
      raise WorkerError(f"worker {self.index} could not build its jail: {ready.get('error')}")

  @property
  def alive(self) -> bool:
    return self.proc.returncode is None and self.proc.poll() is None

  def _recv(self, timeout_s: float) -> tuple[dict, list[int]]:
    """The next message of the zygote and the descriptors it carries (a fork's pidfd)."""
    poller = select.poll()
    poller.register(self.ctrl, select.POLLIN)
    if not poller.poll(timeout_s * 1000):
      raise WorkerError(f"no answer within {timeout_s:g} s")
    data, fds, _, _ = socket.recv_fds(self.ctrl, 1 << 16, 1)
    if not data:
      raise WorkerError("control channel closed")
    return json.loads(data), fds

  def send_spawn(self) -> tuple[int, int, int]:
    """Asks for one episode process; returns (token, request fd, reply fd), both non-blocking.

    Call `receive_acks` before using the fds.
    """
    try:
      req_r, req_w = os.pipe2(os.O_CLOEXEC)
    except OSError as exc:
      raise WorkerError(f"no pipe for an episode: {exc}") from None
    try:
      resp_r, resp_w = os.pipe2(os.O_CLOEXEC)
    except OSError as exc:
      os.close(req_r)
      os.close(req_w)
      raise WorkerError(f"no pipe for an episode: {exc}") from None
    token = self.next_token
    self.next_token += 1
    try:
      socket.send_fds(self.ctrl, [json.dumps({"op": "spawn", "token": token}).encode()],
                      [req_r, resp_w])
    except OSError as exc:
      for fd in (req_r, req_w, resp_r, resp_w):
        os.close(fd)
      raise WorkerError(f"worker {self.index}: spawn request failed: {exc}") from None
    os.close(req_r)
    os.close(resp_w)
    os.set_blocking(req_w, False)
    os.set_blocking(resp_r, False)
    self.live.add(token)
    return token, req_w, resp_r

  def receive_acks(self, tokens: list[int]) -> dict[int, tuple[int, str | None]]:
    """token -> (pidfd, None) when forked, else (-1, why not); raises WorkerError if the
    zygote is gone. The pidfd is the caller's to close."""
    results = {}
    deadline = time.monotonic() + ACK_TIMEOUT_S
    while len(results) < len(tokens):
      msg, fds = self._recv(max(0.0, deadline - time.monotonic()))
      error = msg.get("error") or (None if len(fds) == 1 else "no pidfd with the fork")
      if error:
        for fd in fds:
          os.close(fd)
        self.live.discard(msg["token"])
      results[msg["token"]] = (-1, error) if error else (fds[0], None)
    return results

  def kill(self, tokens: list[int]) -> None:
    """SIGKILLs the episode processes' groups (sent to the zygote, which is their parent)."""
    tokens = [t for t in tokens if t in self.live]
    if not tokens:
      return
    self.live.difference_update(tokens)
    try:
      self.ctrl.send(json.dumps({"op": "kill", "tokens": tokens}).encode())
    except OSError:
      self.stop()

  def stop(self) -> None:
    """Kills the zygote (so its whole PID namespace), then the outer process, and reaps.

    Killing the zygote first lets `outer` reap it, so no zombie is left to the host's init.
    Once `outer` is reaped its pid may be reused, so nothing is signalled any more.
    """
    if self.proc.returncode is None:
      self._kill()
    self.ctrl.close()
    self.live.clear()
    cgroups.remove(self.cgroups)

  def _kill(self) -> None:
    try:
      with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
        zygotes = [int(pid) for pid in f.read().split()] if self.pid_namespace else []
      for pid in zygotes:
        os.kill(pid, signal.SIGKILL)
      if zygotes:
        self.proc.wait(timeout=1.0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
      pass
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
    self.proc.wait()
