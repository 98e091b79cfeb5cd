"""tau2-bench and ACEBench-Agent: loaders and the scorers that work offline (score only).

Neither can be played here. tau2-bench tasks are conversations with a simulated user (an
LLM given the task's `user_scenario`; the published setup uses a proprietary model) inside
tau2's domain environments (airline, retail, telecom databases and tools, in the `tau2`
package); ACEBench-Agent's multi_turn tasks likewise simulate the user with an LLM, and its
multi_step tasks run on ACEBench's own scenario classes (in its repository, not a
package). So `play` refuses, and `score` scores trajectories or end states produced
elsewhere:

  tau2     data: a tau2 tasks JSON file (a list of tasks with "id" and
           "evaluation_criteria.actions": [{"action_id", "name", "arguments",
           "compare_args"?}]). A response is the trajectory's tool calls, a list of
           {"name", "arguments"} (OpenAI messages with "tool_calls" are accepted too).
           Score: tau2's ACTION check, restated (tau2's Action.compare_with_tool_call):
           every gold action has a call with its name and equal arguments on
           `compare_args` (all of the call's arguments when absent); 1 if all match. The DB
           and communicate checks need tau2's environments and are not computed.
  acebench data: ACEBench's data_agent_<multi_step|multi_turn>.json; its possible answers
           are read from possible_answer/<same name> beside it. A response is the final
           state, a list of {ClassName: {attribute: value}} as ACEBench's inference writes
           it. Score: ACEBench's end-to-end accuracy (eval_main.agent_eval with
           checker.agent_checker), restated including its rules: the number of classes
           must match, each ground-truth class is compared with the predicted class whose
           attribute names match exactly (one without such a class is not checked, as in
           ACEBench), dict attributes key by key.
"""

from __future__ import annotations

import json
import pathlib

from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite, mean_record
from spade_jax.eval.suites.user_data import _require_data, read_jsonl

NOT_PLAYABLE = ("{suite} cannot be played offline: it needs {what}. Score trajectories made "
                "elsewhere with `python -m spade_jax.eval score --suite {suite} --data "
                "{suite}=PATH --predictions FILE.jsonl`.")


def _call_of(entry) -> list[dict]:
  """{"name", "arguments"} calls from a call dict or an OpenAI message with tool_calls."""
  if isinstance(entry, dict) and "tool_calls" in entry:
    calls = []
    for call in entry["tool_calls"] or ():
      fn = call.get("function", call)
      args = fn.get("arguments", {})
      calls.append({"name": fn.get("name"),
                    "arguments": json.loads(args) if isinstance(args, str) else args})
    return calls
  if isinstance(entry, dict) and "name" in entry:
    return [{"name": entry["name"], "arguments": entry.get("arguments") or {}}]
  return []


def tau2_action_match(gold: dict, call: dict) -> bool:
  if gold["name"] != call["name"] or not isinstance(call["arguments"], dict):
    return False
  keys = gold.get("compare_args")
  keys = list(call["arguments"]) if keys is None else keys
  if not keys:
    return True
  return ({k: v for k, v in call["arguments"].items() if k in keys} ==
          {k: v for k, v in gold["arguments"].items() if k in keys})


class Tau2(Suite):
  name = "tau2"
  metric = "action_pass"
  sampling = Sampling()

  def __init__(self, data: str | None):
    self.path = _require_data(data, self.name)

  def items(self, limit: int | None = None) -> list[Item]:
    tasks = json.loads(pathlib.Path(self.path).read_text())
    if not isinstance(tasks, list):
      raise ValueError(f"{self.path}: expected a JSON list of tau2 tasks")
    out = []
    for n, task in enumerate(tasks):
      criteria = task.get("evaluation_criteria") if isinstance(task, dict) else None
      if not isinstance(criteria, dict) or "id" not in task:
        raise ValueError(f"{self.path}: task {n} needs 'id' and 'evaluation_criteria'")
      actions = criteria.get("actions") or []
      if not all(isinstance(a, dict) and {"name", "arguments"} <= set(a) for a in actions):
        raise ValueError(f"{self.path}: task {task['id']!r}: each action needs 'name' and "
                         "'arguments'")
      out.append(Item(str(task["id"]), (), {"actions": actions}))
    return out[:limit]

  not_playable = NOT_PLAYABLE.format(
      suite="tau2", what="tau2's user simulator (an LLM) and its domain environments")

  def play(self, items, generator, samples, pool=None):
    raise NotImplementedError(self.not_playable)

  def check_prediction(self, item: Item, value) -> list:
    if not isinstance(value, list) or not value or not all(isinstance(t, list) for t in value):
      raise ValueError(f"item {item.id!r}: 'responses' must be a non-empty list of "
                       "trajectories (lists of tool calls or messages)")
    return value

  def score(self, items, responses, pool=None) -> list[ItemRecord]:
    records = []
    for item, trajectories in zip(items, responses, strict=True):
      scores = []
      for trajectory in trajectories:
        calls = [c for entry in trajectory for c in _call_of(entry)]
        scores.append(float(all(any(tau2_action_match(g, c) for c in calls)
                                for g in item.reference["actions"])))
      records.append(mean_record(item, trajectories, ["scored"] * len(scores), scores))
    return records


def acebench_checker(model_state: dict, answer_state: dict) -> bool:
  """ACEBench's agent_checker: every predicted attribute equals the ground truth's."""
  answer = next(iter(answer_state.values()))
  for attr, value in next(iter(model_state.values())).items():
    if attr not in answer:
      return False
    expected = answer[attr]
    if isinstance(expected, dict):
      if not isinstance(value, dict) or any(k not in value or value[k] != v
                                            for k, v in expected.items()):
        return False
    elif expected != value:
      return False
  return True


def acebench_end_to_end(result, ground_truth) -> bool:
  ground_truth = ground_truth if isinstance(ground_truth, list) else [ground_truth]
  if not isinstance(result, list) or len(result) != len(ground_truth):
    return False
  valid = True  # ACEBench keeps the last verdict when no class matches the keys
  for answer in ground_truth:
    match = next((m for m in result if isinstance(m, dict) and set(m) == set(answer)), None)
    if match is not None:
      valid = acebench_checker(match, answer)
    if not valid:
      return False
  return True


class AceBenchAgent(Suite):
  name = "acebench"
  metric = "end_to_end_accuracy"
  sampling = Sampling()

  def __init__(self, data: str | None):
    self.path = pathlib.Path(_require_data(data, self.name))
    self.answers = self.path.parent / "possible_answer" / self.path.name
    if not self.answers.is_file():
      raise FileNotFoundError(f"acebench: no possible answers at {self.answers}")

  def items(self, limit: int | None = None) -> list[Item]:
    truth = {row["id"]: row["ground_truth"]
             for row in read_jsonl(self.answers, ("id", "ground_truth"))}
    out = []
    for n, row in enumerate(read_jsonl(self.path, ("id", "question")), 1):
      if row["id"] not in truth:
        raise ValueError(f"{self.path}:{n}: id {row['id']!r} has no possible answer in "
                         f"{self.answers}")
      out.append(Item(str(row["id"]), (), {"ground_truth": truth[row["id"]]}))
    return out[:limit]

  not_playable = NOT_PLAYABLE.format(
      suite="acebench", what="ACEBench's scenario classes (multi_step) or an LLM user "
      "simulator (multi_turn)")

  def play(self, items, generator, samples, pool=None):
    raise NotImplementedError(self.not_playable)

  def check_prediction(self, item: Item, value) -> list:
    if not isinstance(value, list) or not value:
      raise ValueError(f"item {item.id!r}: 'responses' must be a non-empty list of final "
                       "states (lists of {ClassName: {attribute: value}})")
    return value

  def score(self, items, responses, pool=None) -> list[ItemRecord]:
    records = []
    for item, states in zip(items, responses, strict=True):
      scores = [float(acebench_end_to_end(s, item.reference["ground_truth"])) for s in states]
      records.append(mean_record(item, states, ["scored"] * len(scores), scores))
    return records
