"""BFCL v4 multi-turn (base, miss_func, miss_param, long_context), scored by BFCL's checker.

A prediction is BFCL's decoded result for a case: `"result"`, one list per user turn of
one list per model step of function-call strings (`"cd(folder='document')"`). Scoring is
BFCL's own (`eval_runner._evaluate_single_multi_turn_entry`, which needs BFCL's model
handlers and so is not importable here, restated): a result that is not a list fails
("inference_error"), one whose turn count differs from the ground truth's fails
("force_terminated"), empty steps are dropped, then `multi_turn_checker` runs the calls on
fresh backend instances and compares state and responses with the ground truth's, turn
by turn.

One deliberate difference, for safety: BFCL `eval`s each call string in the evaluator's
process. Here a call runs only if it is a plain call of a backend method with literal
arguments (checked with `ast`); anything else (nested calls, names, attribute access,
builtins) is replaced by a call that fails with "name '__refused_call__' is not defined",
the same kind of execution error BFCL reports for an unknown name. On results made of
plain calls, which is what models and BFCL's own decoders produce, the scores are equal.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker as bfcl_checker
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite
from spade_jax.eval.suites import bfcl_data
from spade_jax.eval.suites.bfcl_play import Player

_RUN_IDS = itertools.count()


def safe_result(result: list, names: frozenset[str]) -> list:
  """The result with every call that is not plain replaced by REFUSED."""
  return [[[bfcl_data.safe_call(c, names) for c in step] for step in turn] for turn in result]


def check_case(case: dict, result, model_name: str | None = None) -> dict:
  """BFCL's verdict ({"valid": bool, ...}) on a decoded result for `case`."""
  if not isinstance(result, list) or not all(
      isinstance(turn, list) and all(isinstance(step, list) for step in turn)
      for turn in result):
    return {"valid": False, "error_type": "multi_turn:inference_error"}
  if len(result) != len(case["ground_truth"]):
    return {"valid": False, "error_type": "multi_turn:force_terminated"}
  names = bfcl_data.case_methods(case)
  decoded = [[step for step in turn if not multi_turn_utils.is_empty_execute_response(step)]
             for turn in safe_result(result, names)]
  # BFCL keeps backend instances in its module globals keyed by model name and case id;
  # a fresh name per check keeps runs apart, and the instances are dropped afterwards.
  model_name = model_name or f"spade_eval_{next(_RUN_IDS)}"
  entry = {k: v for k, v in case.items() if k != "ground_truth"}
  try:
    return bfcl_checker.multi_turn_checker(decoded, case["ground_truth"], entry,
                                           case["id"].rsplit("_", 1)[0], model_name)
  finally:
    for key in [k for k in vars(multi_turn_utils) if k.startswith(model_name)]:
      del vars(multi_turn_utils)[key]


class BFCLMultiTurn(Suite):
  name = "bfcl_v4_multi_turn"
  metric = "accuracy"
  sampling = Sampling(max_new_tokens=2048, temperature=0.0, top_p=1.0)
  prediction_key = "result"

  def items(self, limit: int | None = None) -> list[Item]:
    all_cases = [c for cat in bfcl_data.CATEGORIES for c in bfcl_data.cases(cat)]
    return [Item(c["id"], (), {"category": c["id"].rsplit("_", 1)[0]})
            for c in all_cases[:limit]]

  def lookup(self, ids) -> dict[str, Item]:
    wanted = set(ids)
    return {it.id: it for it in self.items(None) if it.id in wanted}

  def check_prediction(self, item: Item, value) -> list:
    return [value]  # any shape: BFCL's own checks judge it

  def play(self, items, generator, samples, pool=None) -> list[list]:
    return Player(generator).play([_case(it.id) for it in items], samples)

  def score(self, items: Sequence[Item], responses, pool=None) -> list[ItemRecord]:
    records = []
    for item, results in zip(items, responses, strict=True):
      case = _case(item.id)
      verdicts = [check_case(case, r) for r in results]
      scores = [float(v["valid"]) for v in verdicts]
      records.append(ItemRecord(item.id, case["question"], list(results),
                                [v.get("error_type", "valid") for v in verdicts], scores,
                                sum(scores) / len(scores), item.reference))
    return records


def _case(case_id: str) -> dict:
  category = case_id.rsplit("_", 1)[0]
  for case in bfcl_data.cases(category):
    if case["id"] == case_id:
      return case
  raise KeyError(f"no BFCL case {case_id!r}")
