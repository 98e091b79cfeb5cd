"""Loaders of user-supplied benchmarks (AIME, GPQA, LiveCodeBench) on fixture files written
here: ground truth scores 100 %, corruptions the exact share, bad files fail by name."""

import base64
import csv
import json
import pickle
import zlib

import pytest

from spade_jax.eval.suites import get_suite
from spade_jax.sandbox.pool import SandboxPool


def _jsonl(path, rows):
  path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  return str(path)


def test_aime_avg_at_k(tmp_path):
  data = _jsonl(tmp_path / "aime.jsonl", [{"problem": "1+1?", "answer": "002"},
                                          {"problem": "2+2?", "answer": 4, "id": "p2"}])
  suite = get_suite("aime", data)
  items = suite.items()
  assert [it.id for it in items] == ["aime/0", "p2"]
  responses = [[r"\boxed{2}", "Answer: 2.0", r"<think>\boxed{2}</think>", r"\boxed{3}"],
               [r"\boxed{\frac{8}{2}}"] * 2 + ["no answer", "4"]]
  summary = suite.summarize(suite.score(items, responses))
  assert summary.value == pytest.approx((2 / 4 + 2 / 4) / 2)
  assert summary.no_answer == 3  # thinking only, "no answer", a bare "4"
  bad = _jsonl(tmp_path / "bad.jsonl", [{"problem": "x", "answer": "1/2"}])
  with pytest.raises(ValueError, match=r"bad.jsonl:1: 'answer' must be an integer"):
    get_suite("aime", bad).items()
  with pytest.raises(ValueError, match="--data aime=PATH"):
    get_suite("aime", None)


def test_gpqa_shuffle_is_fixed_and_letters_score(tmp_path):
  path = tmp_path / "gpqa.csv"
  fields = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
            "Incorrect Answer 2", "Incorrect Answer 3"]
  with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, fields)
    w.writeheader()
    for n in range(4):
      w.writerow({"Record ID": f"r{n}", "Question": f"Q{n}?", "Correct Answer": f"right{n}",
                  "Incorrect Answer 1": "w1", "Incorrect Answer 2": "w2",
                  "Incorrect Answer 3": "w3"})
  suite = get_suite("gpqa", str(path))
  items = suite.items()
  assert [it.messages for it in items] == [it.messages for it in suite.items()]
  for it in items:  # the correct letter really labels the correct option
    assert f"{it.reference['answer']}) right" in it.messages[0]["content"]
  assert len({it.reference["answer"] for it in items}) > 1  # shuffled, not always "A"
  wrong = lambda it: "ABCD"[("ABCD".index(it.reference["answer"]) + 1) % 4]
  responses = [[rf"\boxed{{{it.reference['answer']}}}"] if i < 3 else [f"Answer: {wrong(it)}"]
               for i, it in enumerate(items)]
  assert suite.summarize(suite.score(items, responses)).value == pytest.approx(0.75)
  bad = tmp_path / "bad.csv"
  bad.write_text("Question,Correct Answer\nq,a\n")
  with pytest.raises(ValueError, match="missing column"):
    get_suite("gpqa", str(bad)).items()


def _compressed(tests):
  return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def test_livecodebench_stdin_and_functional_in_the_pool(tmp_path):
  stdin_tests = [{"input": "3\n", "output": "6\n", "testtype": "stdin"},
                 {"input": "5\n", "output": "10", "testtype": "stdin"}]
  func_tests = [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]
  rows = [{"question_id": "s1", "question_content": "double it", "starter_code": "",
           "public_test_cases": json.dumps(stdin_tests[:1]),
           "private_test_cases": _compressed(stdin_tests[1:]), "metadata": "{}"},
          {"question_id": "f1", "question_content": "append",
           "starter_code": "class Solution:\n    def add(self, xs, x):",
           "public_test_cases": json.dumps(func_tests),
           "private_test_cases": "[]", "metadata": json.dumps({"func_name": "add"})}]
  suite = get_suite("livecodebench", _jsonl(tmp_path / "lcb.jsonl", rows))
  items = suite.items()
  assert [len(it.reference["tests"]) for it in items] == [2, 1]
  double = "```python\nprint(int(input()) * 2)\n```"
  append = "```python\nclass Solution:\n    def add(self, xs, x):\n        return xs + [x]\n```"
  wrong = "```python\nprint(int(input()) * 2 if int(input() or 3) == 3 else 0)\n```"
  with SandboxPool(num_workers=1, reset_timeout_s=5.0) as pool:
    records = suite.score(items, [[double, wrong], [append, "no code"]], pool)
  assert [r.scores for r in records] == [[1.0, 0.0], [1.0, 0.0]]
  assert suite.summarize(records).value == pytest.approx(0.5)
  evil = base64.b64encode(zlib.compress(pickle.dumps(print))).decode()
  rows[0]["private_test_cases"] = evil
  with pytest.raises(ValueError, match="refused global"):
    get_suite("livecodebench", _jsonl(tmp_path / "evil.jsonl", rows)).items()


def test_livecodebench_input_over_the_sandbox_cap_is_unscored_not_failed(tmp_path):
  big = [{"input": "1\n" * 30000, "output": "ok", "testtype": "stdin"}]
  rows = [{"question_id": "big", "question_content": "x", "starter_code": "",
           "public_test_cases": json.dumps(big), "private_test_cases": "[]"}]
  suite = get_suite("livecodebench", _jsonl(tmp_path / "lcb.jsonl", rows))
  with SandboxPool(num_workers=1) as pool:
    records = suite.score(suite.items(), [["```python\nprint('ok')\n```"]], pool)
  assert records[0].score is None and records[0].details == [["too_big"]]
  assert suite.summarize(records).unscored == 1
