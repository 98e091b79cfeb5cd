"""The sandbox worker: run by `python -I -S -c BOOTSTRAP` (worker_handle.py), which reads this
source from stdin and runs it as `__main__`; the host imports it only to read its file.

Process tree of one worker (host view):
  outer  - started by the pool in its own session; unshares the namespaces and forks:
  zygote - PID 1 of the new PID namespace (host-side pgid = outer's); builds the jailed
           root, pre-imports the allowed modules, then only forks episode processes on
           request over the control socket and kills them on request. It never runs
           environment code, and as PID 1 it cannot be signalled from inside.
  episode processes - one per episode (validation's too), forked from the clean zygote (so
           every environment starts from pristine interpreter state); own session, own
           uid where the host allows it, rlimits, seccomp, stdout/stderr on /dev/null;
           they talk to the host only over the two pipe ends they were given. The host
           gets a pidfd of each (with the fork's acknowledgement) to stop it between calls.
Configuration (JSON) follows the source on stdin; jail.py and runner.py arrive as source in it.
"""

import gc
import json
import os
import signal
import socket
import struct
import sys
import time
import types

HEADER = struct.Struct(">I")
REQ_FD, RESP_FD = 3, 4


def load_module(name: str, source: str) -> types.ModuleType:
  module = types.ModuleType(name)
  exec(compile(source, f"<sandbox {name}>", "exec"), module.__dict__)
  sys.modules[name] = module
  return module


def read_frame(fd: int) -> bytes:
  header = _read_exact(fd, HEADER.size)
  return _read_exact(fd, HEADER.unpack(header)[0]) if header else b""


def _read_exact(fd: int, n: int) -> bytes:
  data = b""
  while len(data) < n:
    chunk = os.read(fd, n - len(data))
    if not chunk:
      return b""
    data += chunk
  return data


def write_frame(fd: int, payload: bytes) -> None:
  data = memoryview(HEADER.pack(len(payload)) + payload)
  while data:
    data = data[os.write(fd, data):]


def episode_main(cfg: dict, jail, runner, req: int, resp: int, uid, zygote_pid: int) -> None:
  """Runs in a freshly forked episode process; never returns."""
  try:
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The protocol pipes become fds 3 and 4; 0, 1, 2 read and write /dev/null; no other fd.
    high = max(req, resp) + 1
    os.dup2(req, high)
    os.dup2(resp, high + 1)
    os.dup2(high, REQ_FD)
    os.dup2(high + 1, RESP_FD)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
      os.dup2(devnull, fd)
    os.closerange(RESP_FD + 1, 1 << 16)
    req, resp = REQ_FD, RESP_FD
    lim = cfg["limits"]
    jail.set_limits(lim["memory_mb"], lim["cpu_s"], lim["fsize_mb"], lim["nofile"], lim["nproc"])
    if cfg["private_mounts"]:
      jail.private_mounts(cfg["tmp_mb"])
    if uid is not None:
      jail.drop_privileges(uid, uid)
    elif os.geteuid() == 0:  # root of a user namespace: keep no capability there either
      jail.keep_capabilities(())
    jail.die_with_parent(zygote_pid)
    if cfg["seccomp"]:
      jail.install_seccomp()
  except BaseException as exc:
    write_frame(resp, json.dumps({"err": "infra", "detail": f"episode setup: {exc}"}).encode())
    os._exit(1)
  episode_loop(runner, req, resp, cfg["runner_limits"])
  os._exit(0)


def episode_loop(runner, req: int, resp: int, limits: dict) -> None:
  episode = None
  while True:
    data = read_frame(req)
    if not data:
      return
    msg = json.loads(data)
    if msg["op"] == "reset":
      episode = runner.EnvInstance(msg["source"], msg["class"], limits)
      reply = episode.reset(msg["seed"])
    elif msg["op"] == "step":
      reply = episode.step(msg["action"])
    else:
      reply = episode.oracle()
    write_frame(resp, reply)


class Zygote:
  """Forks episode processes on request and kills them; PID 1 of the worker's namespace."""

  def __init__(self, cfg: dict, jail, runner, ctrl: socket.socket):
    self.cfg, self.jail, self.runner, self.ctrl = cfg, jail, runner, ctrl
    self.children: dict[int, int] = {}  # token -> pid
    self.count = 0
    signal.signal(signal.SIGCHLD, self._reap)
    jail.no_stop_notices(signal.SIGCHLD)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # no KeyboardInterrupt from same-uid episodes

  def _reap(self, *_) -> None:
    while True:
      try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
      except ChildProcessError:
        return
      if pid == 0:
        return

  def _next_uid(self):
    base = self.cfg["uid_base"]
    if base is None:
      return None
    self.count += 1
    return base + self.count % self.cfg["uid_span"]

  def spawn(self, token: int, fds) -> None:
    uid = self._next_uid()
    try:
      pid = os.fork()
    except OSError as exc:
      for fd in fds:
        os.close(fd)
      self.ctrl.send(json.dumps({"token": token, "error": f"fork: {exc}"}).encode())
      return
    if pid == 0:
      self.ctrl.close()
      episode_main(self.cfg, self.jail, self.runner, fds[0], fds[1], uid, self.pid)
    for fd in fds:
      os.close(fd)
    self.children[token] = pid
    try:  # the host stops the episode between its calls through this descriptor
      pidfd = os.pidfd_open(pid)
    except OSError as exc:
      self.kill([token])
      self.ctrl.send(json.dumps({"token": token, "error": f"pidfd_open: {exc}"}).encode())
      return
    socket.send_fds(self.ctrl, [json.dumps({"token": token, "pid": pid}).encode()], [pidfd])
    os.close(pidfd)

  def kill(self, tokens) -> None:
    killed = []
    for token in tokens:
      pid = self.children.pop(token, None)
      for kill in (os.killpg, os.kill) if pid is not None else ():
        try:  # the group (the episode's session); the process too, if not yet setsid
          kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      if pid is not None:
        killed.append(pid)
    if self.cfg["scan_strays"]:
      self._kill_strays()
    self._reap_killed(killed)

  def _reap_killed(self, pids: list[int], timeout_s: float = 0.5) -> None:
    """Reaps the episodes just killed, waiting at most `timeout_s` for them to exit.

    The SIGCHLD handler alone can leave one a zombie: CPython runs handlers between
    bytecodes, so a SIGCHLD that arrives while `_reap` runs is noted but not handled when
    the interrupted recv is retried in C, only at the next message, and a kill can be the
    last one (seen as a zombie of the zygote under load, 2026-12-04).
    """
    deadline = time.monotonic() + timeout_s
    pending = set(pids)
    while pending:
      for pid in list(pending):
        try:
          if os.waitpid(pid, os.WNOHANG)[0]:
            pending.discard(pid)
        except ChildProcessError:  # reaped by the handler meanwhile
          pending.discard(pid)
      if not pending or time.monotonic() > deadline:
        return  # any still exiting: the handler reaps them
      time.sleep(0.001)

  def _kill_strays(self) -> None:
    """Kills every process in the namespace outside the live episodes' process groups."""
    live = set(self.children.values())
    for name in os.listdir("/proc"):
      if not name.isdigit() or int(name) in (1, self.pid):
        continue
      try:
        with open(f"/proc/{name}/stat") as f:
          pgid = int(f.read().rsplit(")", 1)[1].split()[2])
        if pgid not in live:
          os.kill(int(name), signal.SIGKILL)
      except (OSError, ValueError, IndexError):
        continue

  def serve(self) -> None:
    self.pid = os.getpid()
    gc.freeze()  # the collector then leaves the zygote's objects (shared pages) alone
    self.ctrl.send(json.dumps({"ready": True}).encode())
    while True:
      msg, fds, _, _ = socket.recv_fds(self.ctrl, 1 << 16, 2)
      if not msg:
        os._exit(0)
      msg = json.loads(msg)
      if msg["op"] == "spawn":
        self.spawn(msg["token"], fds)
      elif msg["op"] == "kill":
        self.kill(msg["tokens"])


def main() -> None:
  cfg = json.loads(sys.stdin.buffer.read())
  jail = load_module("jail", cfg["jail_source"])
  runner = load_module("runner", cfg["runner_source"])
  ctrl = socket.socket(fileno=cfg["ctrl_fd"])
  try:
    jail.die_with_parent(cfg["host_pid"])
    namespaces = cfg["namespaces"]
    if namespaces:
      uid, gid = os.getuid(), os.getgid()
      jail.unshare(namespaces)
      if "user" in namespaces:
        jail.map_user(uid, gid)
    if "pid" in namespaces:
      pid = os.fork()
      if pid:
        ctrl.close()
        os.waitpid(pid, 0)
        os._exit(0)
      jail.die_with_parent(0)
    for name in cfg["preimport"]:
      __import__(name)
    if "mount" in namespaces:
      jail.build_root(cfg["extra_dirs"], cfg["tmp_mb"])
    if "uts" in namespaces:
      socket.sethostname("sandbox")
    os.chdir("/tmp" if "mount" in namespaces else "/")
    jail.undumpable()
    if cfg["uid_base"] is not None:  # root: keep what forking jailed episodes needs
      jail.keep_capabilities((jail.CAP_KILL, jail.CAP_SETGID, jail.CAP_SETUID,
                              jail.CAP_SYS_ADMIN))
  except BaseException as exc:
    ctrl.send(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
    os._exit(1)
  Zygote(cfg, jail, runner, ctrl).serve()


if __name__ == "__main__":
  main()
