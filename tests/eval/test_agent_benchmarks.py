"""tau2-bench and ACEBench-Agent loaders on fixture files: scoring of trajectories and end
states made elsewhere, and a plain refusal to play them offline."""

import json

import pytest

from spade_jax.eval.suites import get_suite

TAU2_TASKS = [
    {"id": "t0", "user_scenario": {"instructions": "cancel my order"},
     "evaluation_criteria": {"actions": [
         {"action_id": "a", "name": "find_user", "arguments": {"email": "e@x"}},
         {"action_id": "b", "name": "cancel", "arguments": {"order": "#1", "reason": "x"},
          "compare_args": ["order"]}]}},
    {"id": "t1", "evaluation_criteria": {"actions": []}},
]


def test_tau2_action_scoring(tmp_path):
  path = tmp_path / "tasks.json"
  path.write_text(json.dumps(TAU2_TASKS))
  suite = get_suite("tau2", str(path))
  items = suite.items()
  full = [{"name": "find_user", "arguments": {"email": "e@x"}},
          {"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {
              "name": "cancel", "arguments": json.dumps({"order": "#1", "reason": "other"})}}]}]
  wrong_arg = [full[0], {"name": "cancel", "arguments": {"order": "#2", "reason": "x"}}]
  records = suite.score(items, [[full, wrong_arg, full[:1]], [[]]])
  assert [r.scores for r in records] == [[1.0, 0.0, 0.0], [1.0]]  # no gold actions: 1
  with pytest.raises(NotImplementedError, match="user simulator"):
    suite.play(items, None, 1)


def _acebench_files(tmp_path):
  data = tmp_path / "data_agent_multi_step.json"
  answers = tmp_path / "possible_answer" / data.name
  answers.parent.mkdir()
  data.write_text(json.dumps({"id": "agent_multi_step_0", "question": "order a pizza",
                              "initial_config": {}, "function": []}) + "\n")
  truth = [{"BaseApi": {"wifi": True, "logged_in": True}},
           {"FoodPlatform": {"logged_in_users": ["Eve"], "users": {"Eve": {"balance": 412.0}}}}]
  answers.write_text(json.dumps({"id": "agent_multi_step_0", "ground_truth": truth,
                                 "mile_stone": []}) + "\n")
  return data, truth


def test_acebench_end_state_scoring(tmp_path):
  data, truth = _acebench_files(tmp_path)
  suite = get_suite("acebench", str(data))
  items = suite.items()
  poor = json.loads(json.dumps(truth))
  poor[1]["FoodPlatform"]["users"]["Eve"]["balance"] = 500.0
  extra_attr = json.loads(json.dumps(truth))
  extra_attr[0]["BaseApi"]["battery"] = 3
  states = [truth, poor, truth[:1], extra_attr, list(reversed(truth))]
  assert suite.score(items, [states])[0].scores == [1.0, 0.0, 0.0, 0.0, 1.0]
  with pytest.raises(NotImplementedError, match="cannot be played offline"):
    suite.play(items, None, 1)


def test_acebench_needs_its_possible_answers(tmp_path):
  data = tmp_path / "data_agent_multi_turn.json"
  data.write_text("")
  with pytest.raises(FileNotFoundError, match="possible_answer"):
    get_suite("acebench", str(data))
