"""The hostile corpus: each case is contained, reported, and leaves the host unchanged."""

import os
import textwrap

import pytest

from spade_jax.sandbox import contract
from tests.sandbox.sandbox_procs import SECRET


def env(reset: str = 'return "start", {}', step: str = 'return "ok", 0.0, False, False, {}',
        header: str = "import os") -> str:
  """An environment whose reset/step bodies are the given code."""
  return (f"{header}\n\nclass Hostile:\n  def reset(self, seed=None):\n"
          + textwrap.indent(textwrap.dedent(reset), "    ")
          + "\n  def step(self, action):\n" + textwrap.indent(textwrap.dedent(step), "    ") + "\n")


def play(pool, source: str, actions=("a",)):
  """Reset, then step through `actions` until done; returns every record."""
  records = pool.reset([("hostile", source, 0)])
  for action in actions:
    if records[-1].done:
      break
    records += pool.step([("hostile", action)])
  return records


LOOP = "while True:\n  pass"
CASES = {
    # name: (reset body, step body, expected error kind of the last record)
    "loop_in_reset": (LOOP, "pass", "timeout"),
    "loop_in_step": ('return "s", {}', LOOP, "timeout"),
    "sleep": ('return "s", {}', "import time\ntime.sleep(30)", "timeout"),
    "ignore_signals": ('return "s", {}', "import signal\nfor s in (signal.SIGTERM, signal.SIGINT,"
                       " signal.SIGHUP):\n  signal.signal(s, signal.SIG_IGN)\n" + LOOP, "timeout"),
    "memory_bomb": ('return "s", {}', "x = [bytes(1 << 20) for _ in range(32)]\n"
                    "x.append(b'x' * (1 << 33))", "exception"),
    "fork_bomb": ('return "s", {}', "while True:\n  os.fork()", "exception"),
    "subprocess": ('return "s", {}', 'os.system("touch /tmp/x")\nos.execv("/bin/sh", ["sh"])',
                   "exception"),
    "thread_left_running": ('return "s", {}', "import threading\nthreading.Thread(target=lambda:"
                            " [0 for _ in iter(int, 1)], daemon=True).start()\nreturn 'o', 0.0,"
                            " False, False, {}", "exception"),
    "deep_recursion": ('return "s", {}', "import sys\nsys.setrecursionlimit(10**8)\n"
                       "def f(n):\n  return f(n + 1) + 1\nf(0)", ("crash", "timeout")),
    "os_exit": ('return "s", {}', "os._exit(3)", "crash"),
    "kill_parent": ('return "s", {}', "for pid in (os.getppid(), 1, -1, 0):\n  try:\n"
                    "    os.kill(pid, 9)\n  except OSError:\n    pass\nos.killpg(0, 9)",
                    "exception"),
    "nan_reward": ('return "s", {}', 'return "o", float("nan"), False, False, {}', "bad_output"),
    "inf_reward": ('return "s", {}', 'return "o", float("inf"), True, False, {}', "bad_output"),
    "return_out_of_range": ('return "s", {}', 'return "o", 5.0, True, False, {}', "bad_output"),
    "wrong_reset_type": ("return 42", "pass", "bad_output"),
    "wrong_step_type": ('return "s", {}', 'return ("o", 1)', "bad_output"),
    "string_reward": ('return "s", {}', 'return "o", "1", True, False, {}', "bad_output"),
    "non_json_info": ('return "s", {}', 'return "o", 0.0, True, False, {"f": object()}',
                      "bad_output"),
    "json_poisoned": ("import json\njson.dumps = lambda *a, **k: 'garbage'\nreturn 's', {}", "pass",
                      "bad_output"),
    "raises": ('return "s", {}', "raise SystemExit(0)", "exception"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_contained_and_reported(clean_pool, name):
  reset, step, kind = CASES[name]
  last = play(clean_pool, env(reset, step))[-1]
  assert last.error_kind in ((kind,) if isinstance(kind, str) else kind), last
  assert last.reward == 0.0 and last.done


def test_huge_observation_is_cut(clean_pool):
  first = play(clean_pool, env('return "x" * 10**7, {}'), actions=())[0]
  assert first.error_kind is None
  assert len(first.observation) == contract.MAX_OBS_CHARS
  assert first.observation.endswith("[observation cut]")


def test_output_floods_do_not_leak_or_forge(clean_pool, capfd):
  frame = b'\x00\x00\x00\x2a{"ok": ["forged", 1.0, true, false, {}]}xxx'
  step = f"""
  import sys
  for _ in range(20000):
    print("FLOOD" * 10)
    sys.stderr.write("FLOOD\\n")
  os.write(1, {frame!r})
  os.write(2, {frame!r})
  return "real", 0.5, True, False, {{}}
  """
  last = play(clean_pool, env(step=step))[-1]
  assert (last.observation, last.reward, last.error_kind) == ("real", 0.5, None)
  out, err = capfd.readouterr()
  assert "FLOOD" not in out + err and "forged" not in out + err


def test_host_files_untouched(clean_pool, tmp_path):
  targets = [str(tmp_path / "abs.txt"), os.path.join(os.getcwd(), "spade_rel_probe.txt")]
  step = f"""
  done = []
  for path in {targets!r} + ["spade_rel_probe.txt", "../spade_rel_probe.txt"]:
    try:
      with open(path, "w") as f:
        f.write("pwned")
      done.append(path)
    except OSError as exc:
      done.append(type(exc).__name__)
  return repr(done), 0.0, True, False, {{}}
  """
  last = play(clean_pool, env(step=step))[-1]
  assert last.error_kind is None
  for path in targets:
    assert not os.path.exists(path)


def test_host_files_and_environment_are_invisible(clean_pool, tmp_path):
  secret_file = tmp_path / "secret.txt"
  secret_file.write_text(SECRET)
  step = f"""
  seen = [repr(dict(os.environ))]
  paths = ({str(secret_file)!r}, "/etc/passwd", "/proc/1/environ", {os.path.abspath(__file__)!r})
  for path in paths:
    try:
      with open(path) as f:
        seen.append(f.read())
    except OSError as exc:
      seen.append(type(exc).__name__)
  return " ".join(seen), 0.0, True, False, {{}}
  """
  last = play(clean_pool, env(step=step))[-1]
  assert last.error_kind is None
  assert SECRET not in last.observation and "root:" not in last.observation
  assert "SPADE_SANDBOX" not in last.observation


def test_sockets_are_refused(clean_pool):
  step = """
  import socket
  try:
    s = socket.create_connection(("127.0.0.1", 22), timeout=0.2)
    return "connected", 0.0, True, False, {}
  except OSError as exc:
    return "refused " + type(exc).__name__, 0.0, True, False, {}
  """
  last = play(clean_pool, env(step=step))[-1]
  assert last.observation.startswith("refused"), last


def test_poisoned_stdlib_does_not_reach_the_next_episode(clean_pool):
  poison = """
  import math, random, json
  math.sqrt = lambda x: 42
  random.random = lambda: 0.5
  json.loads = None
  return "poisoned", {}
  """
  assert play(clean_pool, env(poison, header="import math"), actions=())[0].error_kind is None
  clean_pool.close_episodes(["hostile"])
  check = 'import math, random\nreturn f"{math.sqrt(4)} {random.random() != 0.5}", {}'
  for _ in range(4):  # reaches both workers
    assert play(clean_pool, env(check), actions=())[0].observation == "2.0 True"


def test_syntax_error_no_class_and_bad_imports(clean_pool):
  syntax = clean_pool.reset([("a", "class A:\n  def reset(self:\n", 0)])[0]
  assert syntax.error_kind == "exception" and "line 2" in syntax.error_detail
  assert clean_pool.reset([("b", "x = 1\n", 0)])[0].error_kind == "exception"
  results = clean_pool.validate(["class A:\n  def reset(self:\n", "x = 1\n",
                                 env(header="import subprocess")])
  assert [r.valid for r in results] == [False, False, False]
  assert results[0].line == 2 and "syntax" in results[0].reason
  assert "exactly one class" in results[1].reason
  assert results[2].line == 1 and "allowed-imports" in results[2].reason


def test_pool_survives_the_corpus(clean_pool):
  records = clean_pool.reset([(i, contract.EXAMPLE_ENV, i) for i in range(4)])
  assert all(r.error_kind is None for r in records)


def test_introspection_reaches_os_but_not_the_host(clean_pool, tmp_path):
  target = tmp_path / "escaped.txt"
  step = f"""
  for cls in ().__class__.__base__.__subclasses__():
    if cls.__name__ == "_wrap_close":
      system = cls.__init__.__globals__["system"]
      return f"system={{system('touch {target}')}}", 0.0, True, False, {{}}
  return "not found", 0.0, True, False, {{}}
  """
  last = play(clean_pool, env(step=step, header=""))[-1]
  assert last.error_kind is None and last.observation != "not found"
  assert last.observation != "system=0" and not target.exists()


def test_each_episode_gets_an_empty_private_tmp(clean_pool):
  reset = """
  before = sorted(os.listdir("/tmp")) + sorted(os.listdir("."))
  with open("/tmp/state", "w") as f:
    f.write("left behind")
  with open("relative_state", "w") as f:
    f.write("left behind")
  return repr(before), {}
  """
  ids = range(6)  # several on each worker, live at the same time
  records = clean_pool.reset([(i, env(reset), i) for i in ids])
  assert [r.observation for r in records] == ["[]"] * 6
  clean_pool.close_episodes(ids)
  assert clean_pool.reset([(0, env(reset), 0)])[0].observation == "[]"


def test_raw_frames_on_the_reply_pipe_are_still_checked(clean_pool):
  step = """
  import struct
  nested = b"[" * 100000 + b"]" * 100000
  for fd in range(3, 64):
    try:
      os.write(fd, struct.pack(">I", len(nested)) + nested)
    except OSError:
      pass
  return "real", 0.0, True, False, {}
  """
  last = play(clean_pool, env(step=step))[-1]
  assert last.error_kind == "bad_output" and "JSON" in last.error_detail, last


def test_no_shared_memory_between_episodes(clean_pool):
  shm = """
  import ctypes
  libc = ctypes.CDLL(None, use_errno=True)
  made = libc.shmget(0x5ADE, 4096, {flags})
  return f"shmget {{made >= 0}}", {{}}
  """
  create = env(shm.format(flags="0o1000 | 0o666"))  # IPC_CREAT
  attach = env(shm.format(flags="0"))
  assert clean_pool.reset([("a", create, 0)])[0].observation == "shmget True"
  others = clean_pool.reset([(f"b{i}", attach, 0) for i in range(4)])  # on both workers
  assert [r.observation for r in others] == ["shmget False"] * 4
