"""SandboxPool behaviour: batching, truncation, replacement, isolation, clean shutdown."""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from spade_jax.sandbox import cgroups, contract, isolation
from spade_jax.sandbox.pool import SandboxPool
from tests.sandbox.sandbox_procs import descendants, settled_descendants

COUNTER = """
import random

class Counter:
  calls = 0

  def reset(self, seed=None):
    Counter.calls += 1
    self.n = random.Random(seed).randint(0, 9)
    return f"seed {seed} n {self.n} calls {Counter.calls}", {"n": self.n}

  def step(self, action):
    self.n += int(action)
    return f"n {self.n}", 0.25 * (int(action) > 0), self.n >= 20, False, {}
"""

TOOLS = """
class Shop:
  tools = [{"type": "function", "function": {"name": "buy", "description": "Buy an item.",
            "parameters": {"type": "object", "properties": {"item": {"type": "string"}}}}}]

  def reset(self, seed=None):
    return "Buy apples.", {}

  def step(self, action):
    return "bought", 1.0, True, False, {}
"""


def test_batched_reset_and_step_keep_order(clean_pool):
  ids = list(range(12))
  records = clean_pool.reset([(i, COUNTER, i) for i in ids])
  assert [r.observation.split(" n ")[0] for r in records] == [f"seed {i}" for i in ids]
  # Every episode has its own fresh class state (calls is always 1).
  assert all(r.observation.endswith("calls 1") for r in records)
  start = [r.info["n"] for r in records]
  stepped = clean_pool.step([(i, str(i)) for i in reversed(ids)])
  assert [r.observation for r in stepped] == [f"n {start[i] + i}" for i in reversed(ids)]
  assert {len(w.live) for w in clean_pool._workers} == {6}


def test_truncation_return_and_close(clean_pool):
  clean_pool.reset([("t", COUNTER, 0)])
  records = [clean_pool.step([("t", "0")])[0] for _ in range(8)]  # the pool's max_turns
  assert [r.truncated for r in records] == [False] * 7 + [True]
  assert clean_pool.step([("t", "0")])[0].error_kind == "infra"  # no longer live
  clean_pool.reset([("r", COUNTER, 0)])
  records = [clean_pool.step([("r", "9")])[0] for _ in range(3)]
  assert records[1].terminated and records[1].error_kind is None  # 6 + 9 + 9 >= 20
  assert records[2].error_kind == "infra"
  clean_pool.reset([("x", COUNTER, 0)])
  clean_pool.close_episodes(["x"])
  assert clean_pool.step([("x", "1")])[0].error_kind == "infra"


def test_tools_reach_the_reset_info(clean_pool):
  first = clean_pool.reset([("shop", TOOLS, 0)])[0]
  assert first.info["tools"][0]["function"]["name"] == "buy"
  assert clean_pool.validate([TOOLS])[0].reason is not None  # constant: flagged
  bad = TOOLS.replace('"type": "function"', '"type": "tool"')
  assert clean_pool.reset([("bad", bad, 0)])[0].error_kind == "bad_output"


def test_dead_worker_is_replaced(clean_pool):
  clean_pool.reset([(i, COUNTER, i) for i in range(4)])
  victim = clean_pool._workers[0]
  inside = descendants(victim.proc.pid)
  assert len(inside) == 1 + 2  # its zygote and two episodes
  os.killpg(victim.proc.pid, signal.SIGKILL)
  victim.proc.wait()
  _wait_until_gone(inside)  # the kernel tears the namespace down asynchronously
  records = clean_pool.step([(i, "1") for i in range(4)])
  kinds = sorted(str(r.error_kind) for r in records)
  assert kinds == ["None", "None", "infra", "infra"], records
  fresh = clean_pool.reset([(i, COUNTER, i) for i in range(4)])
  assert all(r.error_kind is None for r in fresh)
  assert clean_pool._workers[0] is not victim and clean_pool._workers[0].alive


def test_close_leaves_no_process_and_strict_refusal():
  before = descendants(os.getpid())  # the module's pool, if it is up
  pool = SandboxPool(num_workers=2, max_turns=4)
  try:
    pool.reset([(i, COUNTER, i) for i in range(6)])
    # The start-up smoke episode is killed asynchronously: wait until its zygote reaped it.
    now = settled_descendants(os.getpid(), len(before) + 2 * 2 + 6)
    assert len(now - before) == 2 * 2 + 6
  finally:  # a failure must not leave this pool's processes to the next tests' checks
    pool.close()
  assert settled_descendants(os.getpid(), len(before)) == before
  layers = isolation.Layers(root=False, namespaces=False, user_namespaces=False, seccomp=False,
                        cgroup_v1=(), bubblewrap=False, machine="x86_64", kernel="")
  for level in ("strict", "basic"):
    try:
      isolation.worker_setup(level, layers)
      raise AssertionError(f"{level} accepted a host without isolation")
    except isolation.SandboxUnavailable as exc:
      assert "isolation" in str(exc)
  assert isolation.worker_setup("none", layers)["namespaces"] == []
  seccomp_only = isolation.Layers(**{**layers.__dict__, "seccomp": True})
  assert isolation.worker_setup("basic", seccomp_only)["seccomp"]


def test_validation_results(clean_pool):
  nondeterministic = contract.EXAMPLE_ENV.replace("random.Random(seed)", "random.Random()")
  nondeterministic = nondeterministic.replace('return "I picked',
                                              'return f"{self.rng.random()} I picked')
  slow = contract.EXAMPLE_ENV.replace("self.turns += 1", "self.turns += 1\n    while True: pass")
  bad_turns = contract.EXAMPLE_ENV.replace("max_turns = 6", "max_turns = 'six'")
  results = clean_pool.validate([contract.EXAMPLE_ENV, COUNTER, nondeterministic, slow, bad_turns])
  assert results[0].valid and results[0].class_name == "GuessNumber" and results[0].max_turns == 6
  assert not results[1].valid and "ValueError" in results[1].reason  # int("yes")
  assert not results[2].valid and "deterministic" in results[2].reason
  assert not results[3].valid and "timeout" in results[3].reason
  assert not results[4].valid and "max_turns" in results[4].reason


TRAINER = """
import os, time
from tests.sandbox.sandbox_procs import settled_descendants
from spade_jax.sandbox.pool import SandboxPool
pool = SandboxPool(num_workers=2)
pool.reset([(i, {env!r}, i) for i in range(4)])
# wait until the killed start-up smoke episode is reaped: 2 workers x 2 + 4 episodes
print(" ".join(map(str, sorted(settled_descendants(os.getpid(), 2 * 2 + 4)))), flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except OSError:  # gone (ENOENT or ESRCH)
    return False


def _wait_until_gone(pids, timeout_s: float = 5.0) -> None:
  deadline = time.monotonic() + timeout_s
  while any(map(_running, pids)) and time.monotonic() < deadline:
    time.sleep(0.02)
  assert not any(map(_running, pids))


def test_workers_die_with_a_killed_trainer():
  script = TRAINER.format(env=COUNTER)
  trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  pids = [int(p) for p in trainer.stdout.readline().split()]
  assert len(pids) == 2 * 2 + 4
  trainer.kill()
  trainer.wait()
  _wait_until_gone(pids)
  controllers = isolation.worker_setup("strict", isolation.detect_layers())["cgroups"]
  cgroups.sweep(controllers)  # what the next pool does at start
  for controller in controllers:
    names = os.listdir(cgroups.parent_dir(controller))
    assert not [n for n in names if n.startswith(f"{cgroups.PREFIX}{trainer.pid}-")]


FALLBACKS = {
    # mode: (layers the detection pretends to find, isolation level, what fork/socket/kill give)
    "user_namespace": (dict(namespaces=False, user_namespaces=True, seccomp=True), "strict",
                       "PermissionError PermissionError PermissionError"),
    # Namespaces without seccomp: a socket can be made (in an empty network namespace).
    "namespaces_only": (dict(namespaces=True, user_namespaces=False, seccomp=False), "strict",
                        "BlockingIOError allowed PermissionError"),
    "seccomp_only": (dict(namespaces=False, user_namespaces=False, seccomp=True), "basic",
                     "PermissionError PermissionError PermissionError"),
    # rlimits only: NPROC=1 under a unique uid stops fork; the network is NOT blocked.
    "rlimits_only": (dict(namespaces=False, user_namespaces=False, seccomp=False), "none",
                     "BlockingIOError allowed PermissionError"),
}
LAYER_ENV = """
import os, socket
class LayerCheck:
  def reset(self, seed=None):
    return "ready", {}
  def step(self, action):
    if action == "loop":
      while True:
        pass
    out = []
    for call in (os.fork, socket.socket, lambda: os.kill(os.getppid(), 9)):
      try:
        call()
        out.append("allowed")
      except OSError as exc:
        out.append(type(exc).__name__)
    return " ".join(out), 0.0, False, False, {}
"""


@pytest.mark.parametrize("mode", sorted(FALLBACKS))
def test_fallback_layers(monkeypatch, mode):
  found, level, expected = FALLBACKS[mode]
  layers = dataclasses.replace(isolation.detect_layers(), **found)
  monkeypatch.setattr(isolation, "detect_layers", lambda: layers)
  before = descendants(os.getpid())
  with SandboxPool(num_workers=1, isolation=level, step_timeout_s=1.0) as pool:
    expected_ns = ([*isolation.NAMESPACES] if layers.namespaces else
                   ["user", *isolation.NAMESPACES] if layers.user_namespaces else [])
    assert pool.setup["namespaces"] == expected_ns
    assert pool.reset([(0, LAYER_ENV, 0)])[0].observation == "ready"
    assert pool.step([(0, "x")])[0].observation == expected
    assert pool.step([(0, "loop")])[0].error_kind == "timeout"
    assert pool.reset([(1, LAYER_ENV, 0)])[0].error_kind is None
  assert settled_descendants(os.getpid(), len(before)) == before


def test_caller_mistakes_become_infra_records(clean_pool):
  import numpy as np

  records = clean_pool.reset([("np", COUNTER, np.int64(3)), ("str", COUNTER, "3"),
                              ("twice", COUNTER, 1), ("twice", COUNTER, 2),
                              ("bytes", COUNTER.encode(), 1)])
  assert records[0].observation.startswith("seed 3 ")
  assert [r.error_kind for r in records[1:]] == ["infra", None, "infra", "exception"]
  step = clean_pool.step([("np", "1"), ("np", "1"), ("never", "1")])
  assert [r.error_kind for r in step] == [None, "infra", "infra"]
