"""Process helpers for the sandbox tests (a unique module name: no conftest imports)."""

import os
import time

SECRET = "spade-test-secret-3141"
os.environ["SPADE_SANDBOX_TEST_SECRET"] = SECRET  # must never be visible to environments
VALIDATION_SEED = 7  # the sandbox tests' pools draw their validation seeds from this one


def descendants(pid: int) -> set[int]:
  """All live descendants of `pid` (host PIDs), read from /proc."""
  found, todo = set(), [pid]
  while todo:
    p = todo.pop()
    try:
      tids = os.listdir(f"/proc/{p}/task")
    except OSError:  # gone (ENOENT or ESRCH)
      continue
    for tid in tids:
      try:
        with open(f"/proc/{p}/task/{tid}/children") as f:
          kids = [int(k) for k in f.read().split()]
      except OSError:  # gone (ENOENT or ESRCH)
        continue
      for kid in kids:
        if kid not in found:
          found.add(kid)
          todo.append(kid)
  return found


def describe(pids: set[int]) -> dict[int, str]:
  """pid -> "state ppid (command)" from /proc/PID/stat, for a failing test's message."""
  out = {}
  for pid in sorted(pids):
    try:
      with open(f"/proc/{pid}/stat") as f:
        head, _, tail = f.read().rpartition(")")
      state, ppid = tail.split()[:2]
      out[pid] = f"{state} {ppid} {head.partition('(')[2]}"
    except OSError:
      out[pid] = "gone"
  return out


def settled_descendants(pid: int, expected: int, timeout_s: float = 10.0) -> set[int]:
  """Descendants once their number drops to `expected` (kills are asynchronous; a loaded
  2-core machine can take seconds to reap them)."""
  deadline = time.monotonic() + timeout_s
  while True:
    found = descendants(pid)
    if len(found) <= expected or time.monotonic() > deadline:
      return found
    time.sleep(0.01)
