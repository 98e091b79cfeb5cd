"""BFCL v4 multi-turn: our score equals BFCL's own multi_turn_checker on ground-truth and
corrupted results; calls that are not plain literal method calls never run."""

import copy
import json

import pytest
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker as bfcl_checker

from spade_jax.eval import __main__ as cli
from spade_jax.eval.suites import bfcl, bfcl_data, get_suite


def _truth(case):
  return [[list(turn)] if turn else [] for turn in case["ground_truth"]]


def _changed_argument(case):
  result = copy.deepcopy(_truth(case))
  for turn in result:
    for step in turn:
      for i, call in enumerate(step):
        if "='" in call:
          step[i] = call.replace("='", "='zz_", 1)
          return result
  raise AssertionError("no string argument to corrupt")


CORRUPTIONS = {
    "truth": _truth,
    "dropped_turn": lambda c: _truth(c)[:-1],
    "empty_first_turn": lambda c: [[]] + _truth(c)[1:],
    "changed_argument": _changed_argument,
    "last_turn_twice": lambda c: _truth(c)[:-1] + [_truth(c)[-1] * 2],
}
CASES = [(cat, i) for cat in bfcl_data.CATEGORIES for i in (0, 7)]


def _bfcl_reference(case, result, name):
  """BFCL's own checker, called directly (as eval_runner does after decoding)."""
  if len(result) != len(case["ground_truth"]):
    return False
  entry = {k: v for k, v in case.items() if k != "ground_truth"}
  return bfcl_checker.multi_turn_checker(result, case["ground_truth"], entry,
                                         case["id"].rsplit("_", 1)[0], name)["valid"]


@pytest.mark.parametrize("category, index", CASES)
def test_verdicts_equal_bfcls_own_checker(category, index):
  case = bfcl_data.cases(category)[index]
  for n, (kind, corrupt) in enumerate(CORRUPTIONS.items()):
    result = corrupt(case)
    ours = bfcl.check_case(case, result)["valid"]
    assert ours == _bfcl_reference(case, result, f"reference_{category}_{index}_{n}"), kind
    if kind == "truth":
      assert ours, bfcl.check_case(case, result)
    if kind in ("dropped_turn", "changed_argument") or (
        kind == "empty_first_turn" and case["ground_truth"][0]):
      assert not ours, kind


def test_score_file_gives_the_exact_share(tmp_path):
  cases = bfcl_data.cases("multi_turn_base")[:6]
  lines = [{"id": c["id"], "result": _truth(c) if i % 2 else _truth(c)[:-1]}
           for i, c in enumerate(cases)]
  predictions = tmp_path / "bfcl.jsonl"
  predictions.write_text("\n".join(json.dumps(x) for x in lines))
  cli.main(["score", "--suite", "bfcl_v4_multi_turn", "--predictions", str(predictions),
            "--out", str(tmp_path / "out.jsonl")])
  summary = json.loads((tmp_path / "out.summary.json").read_text())["suites"]
  assert summary["bfcl_v4_multi_turn"]["value"] == 0.5
  assert summary["bfcl_v4_multi_turn"]["n"] == 6
  assert get_suite("bfcl_v4_multi_turn").items(None)[-1].id == "multi_turn_long_context_199"


def test_calls_that_are_not_plain_never_run(tmp_path):
  marker = tmp_path / "pwned"
  case = bfcl_data.cases("multi_turn_base")[0]
  hostile = _truth(case)
  hostile[0][0] = [f"__import__('pathlib').Path('{marker}').touch()",
                   f"cd(folder=open('{marker}', 'w').name)"] + hostile[0][0]
  assert bfcl.check_case(case, hostile)["valid"] is True  # the refused calls only fail
  assert not marker.exists()
  names = bfcl_data.method_names("GorillaFileSystem")
  assert bfcl_data.is_plain_call("cd(folder='a')", names)
  assert bfcl_data.is_plain_call("sort('final_report.pdf')", names)
  assert not bfcl_data.is_plain_call("cd(folder=pwd())", names)
  assert not bfcl_data.is_plain_call("print('x')", names)
  assert not bfcl_data.is_plain_call("cd(**{'folder': 'a'})", names)
