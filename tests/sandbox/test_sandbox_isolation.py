"""Isolation between episodes: what one hostile environment does costs no other episode.

Each hostile environment runs beside a benign twin (`contract.EXAMPLE_ENV`, which validates)
that must still answer and score 1.0 with its oracle's answer.
"""

import dataclasses
import json
import os
import platform
import time
from itertools import pairwise

import pytest

from spade_jax.sandbox import channel, contract, isolation, worker_handle
from spade_jax.sandbox.pool import SandboxPool
from tests.sandbox.sandbox_procs import descendants

STUCK_READER = """
import fcntl, os

class StuckReader:
  def reset(self, seed=None):
    return "ready", {}

  def step(self, action):
    kept = os.dup(3)  # the request pipe stays open, shrunk to one page, and nobody reads it
    fcntl.fcntl(kept, fcntl.F_SETPIPE_SZ, 4096)
    unwritten, self.writer = os.pipe()
    os.dup2(unwritten, 3)  # the worker's frame reader now waits on a pipe nobody writes
    return "stuck", 0.0, False, False, {}
"""

TICKER = """
import signal, time

class Ticker:
  def reset(self, seed=None):
    self.ticks = []
    signal.signal(signal.SIGALRM, lambda *_: self.ticks.append(time.monotonic()))
    signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
    return "ticking", {}

  def step(self, action):
    start, end = map(float, action.split())
    idle = sum(start < t < end for t in self.ticks)
    return f"ticks while idle: {idle}", 0.0, True, False, {}
"""

# Syscalls without a Python wrapper, numbered here independently of jail.py.
RAW_SYSCALLS = {
    "x86_64": {"rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "ioprio_set": 251,
               "process_madvise": 440, "pidfd_getfd": 438, "kcmp": 312},
    "aarch64": {"rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "ioprio_set": 30,
                "process_madvise": 440, "pidfd_getfd": 438, "kcmp": 272},
}

ATTACKER = """
import ctypes, errno, fcntl, json, os, resource, signal, struct

NR = {numbers!r}
libc = ctypes.CDLL(None, use_errno=True)
SIGINFO = ctypes.create_string_buffer(struct.pack("iii", 9, 0, -1), 128)  # SIGKILL, SI_QUEUE


def raw(name, *args):
  if libc.syscall(NR[name], *args) == -1:
    raise OSError(ctypes.get_errno(), name)


def write_proc(pid, name, value):
  with open(f"/proc/{{pid}}/{{name}}", "w") as f:
    f.write(value)


def pidfd(pid):
  try:
    return os.pidfd_open(pid)
  except OSError:
    return -1


ATTACKS = {{  # each against another pid of the namespace; the lethal ones last
    "setpriority": lambda pid: os.setpriority(os.PRIO_PROCESS, pid, 19),
    "sched_setaffinity": lambda pid: os.sched_setaffinity(pid, {{0}}),
    "sched_setscheduler": lambda pid: os.sched_setscheduler(pid, os.SCHED_IDLE,
                                                            os.sched_param(0)),
    "ioprio_set": lambda pid: raw("ioprio_set", 1, pid, 3 << 13),  # a process, the idle class
    "prlimit64": lambda pid: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)),
    "kcmp": lambda pid: raw("kcmp", os.getpid(), pid, 0, 3, 3),
    "/proc/PID/oom_score_adj": lambda pid: write_proc(pid, "oom_score_adj", "1000"),
    "/proc/PID/clear_refs": lambda pid: write_proc(pid, "clear_refs", "1"),
    "/proc/PID/fd": lambda pid: os.listdir(f"/proc/{{pid}}/fd"),
    "fcntl F_SETOWN": lambda pid: fcntl.fcntl(4, fcntl.F_SETOWN, pid),
    "fcntl F_SETSIG": lambda pid: fcntl.fcntl(4, fcntl.F_SETSIG, signal.SIGKILL),
    "pidfd_open": lambda pid: os.close(os.pidfd_open(pid)),
    "pidfd_getfd": lambda pid: raw("pidfd_getfd", pidfd(pid), 3, 0),
    "process_madvise": lambda pid: raw("process_madvise", pidfd(pid), 0, 0, 20, 0),
    "kill": lambda pid: os.kill(pid, signal.SIGKILL),
    "rt_sigqueueinfo": lambda pid: raw("rt_sigqueueinfo", pid, 9, SIGINFO),
    "rt_tgsigqueueinfo": lambda pid: raw("rt_tgsigqueueinfo", pid, pid, 9, SIGINFO),
    "pidfd_send_signal": lambda pid: signal.pidfd_send_signal(pidfd(pid), signal.SIGKILL),
}}


def outcome(attack, pid):
  try:
    attack(pid)
    return "ok"
  except OSError as exc:
    return errno.errorcode.get(exc.errno, str(exc.errno))


class Attacker:
  def reset(self, seed=None):
    pids = [pid for pid in range(2, 64) if pid != os.getpid()]
    gone = {{"ESRCH", "ENOENT"}}  # no such process, or none this process can see
    found = {{name: sorted({{outcome(attack, pid) for pid in pids}} - gone)
             for name, attack in ATTACKS.items()}}
    return json.dumps(found), {{}}

  def step(self, action):
    return "done", 0.0, True, False, {{}}
"""


def oracle_answer(pool, episode_id) -> str:
  [answer] = pool.oracle_actions([episode_id])[0].actions
  return answer


def test_an_unread_request_pipe_times_out_alone(clean_pool):
  clean_pool.reset([("stuck", STUCK_READER, 0), ("twin", contract.EXAMPLE_ENV, 0)])
  assert clean_pool.step([("stuck", "x")])[0].observation == "stuck"
  padded = " " * 6000 + oracle_answer(clean_pool, "twin")  # more than one page of request
  stuck, twin = clean_pool.step([("stuck", padded), ("twin", padded)])
  assert stuck.error_kind == "timeout", stuck
  assert (twin.observation, twin.reward, twin.error_kind) == ("Correct!", 1.0, None)


def test_episodes_do_not_run_between_calls(clean_pool):
  first = clean_pool.reset([("ticker", TICKER, 0), ("twin", contract.EXAMPLE_ENV, 0)])
  assert first[0].observation == "ticking"
  start = time.monotonic()
  time.sleep(0.3)  # the host generating: 60 ticks of an environment left running
  end = time.monotonic()
  ticker, twin = clean_pool.step([("ticker", f"{start} {end}"),
                                  ("twin", oracle_answer(clean_pool, "twin"))])
  assert ticker.observation == "ticks while idle: 0", ticker
  assert twin.reward == 1.0


def _command_line(pid: int) -> tuple[str, ...]:
  """The process's argv read from /proc; () once it is gone or a zombie."""
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return tuple(f.read().decode().split("\0")[:-1])
  except OSError:
    return ()


def test_sandbox_processes_show_the_short_bootstrap_as_their_command(clean_pool):
  """`ps` lists the worker, its zygote and its episodes by the one-line bootstrap, not by the
  zygote's 10 kB of source."""
  clean_pool.reset([("twin", contract.EXAMPLE_ENV, 0)])
  pids = set().union(*({w.proc.pid} | descendants(w.proc.pid) for w in clean_pool._workers))
  assert len(pids) > 2 * len(clean_pool._workers)  # an episode runs beside outer and zygote
  commands = {_command_line(pid) for pid in pids} - {()}
  assert sorted(len(" ".join(c)) for c in commands)[-1] < 200
  assert commands == {(isolation.interpreter(), "-I", "-S", "-c", worker_handle.BOOTSTRAP)}


@pytest.fixture(scope="module")
def userns_pool():
  """A pool in user-namespace mode (the no-root set-up): every episode has the same uid."""
  layers = dataclasses.replace(isolation.detect_layers(), namespaces=False,
                               user_namespaces=True, seccomp=True)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(isolation, "detect_layers", lambda: layers)
    pool = SandboxPool(num_workers=1, reset_timeout_s=1.5, step_timeout_s=1.0)
  with pool:
    assert pool.setup["namespaces"][0] == "user" and not pool.setup["drop_uid"]
    yield pool


def test_same_uid_episodes_cannot_reach_each_other(userns_pool):
  numbers = RAW_SYSCALLS[platform.machine()]
  userns_pool.reset([("twin", contract.EXAMPLE_ENV, 0)])
  attacker = userns_pool.reset([("attacker", ATTACKER.format(numbers=numbers), 0)])[0]
  assert attacker.error_kind is None, attacker
  found = json.loads(attacker.observation)
  hidden = {name: [] for name in found if name.startswith("/proc/")}  # siblings are invisible
  assert found == {**{name: ["EPERM"] for name in found}, **hidden}, found
  twin = userns_pool.step([("twin", oracle_answer(userns_pool, "twin"))])[0]
  assert (twin.reward, twin.error_kind) == (1.0, None), twin
  verdict = userns_pool.validate([contract.EXAMPLE_ENV])[0]
  assert verdict.valid, verdict


def test_worker_uid_ranges_do_not_collide():
  bases = sorted(worker_handle.uid_base(slot) for slot in range(worker_handle.UID_SLOTS))
  assert bases[0] > 1 << 16 and bases[-1] + worker_handle.UID_SPAN < 1 << 32
  assert all(b - a >= worker_handle.UID_SPAN for a, b in pairwise(bases))


def test_a_waiting_reply_is_read_even_past_the_deadline():
  req_r, req_w = os.pipe()
  resp_r, resp_w = os.pipe()
  os.set_blocking(req_w, False)
  os.set_blocking(resp_r, False)
  os.write(resp_w, channel.HEADER.pack(7) + b'"reply"')
  try:
    calls = {"late": channel.Call(req_w, resp_r, b'{"op": "step"}')}
    assert list(channel.exchange(calls, 0.0, 1024)) == [("late", channel.OK, b'"reply"')]
  finally:
    for fd in (req_r, req_w, resp_r, resp_w):
      os.close(fd)
