"""Reasoning Gym hard tier: the datasets' own answers win, corruptions give the exact share."""

import json

import pytest

from spade_jax.eval import __main__ as cli
from spade_jax.eval.suites import get_suite
from spade_jax.eval.suites.reasoning_gym import HARD_DATASETS

N = 16  # two items of each of the eight datasets


@pytest.fixture(scope="module")
def items():
  return get_suite("reasoning_gym").items(N)


def test_items_cover_every_dataset_at_the_hard_level(items):
  names = {it.reference["dataset"] for it in items}
  assert names == {n for group in HARD_DATASETS.values() for n in group}
  again = get_suite("reasoning_gym").items(N)
  assert [it.messages for it in again] == [it.messages for it in items]  # fixed seeds


def test_score_truth_and_corruptions(items, tmp_path):
  wrong = "<answer>definitely not it</answer>"
  lines = []
  for i, it in enumerate(items):
    truth = f"<think>hmm <answer>no</answer></think>so <answer>{it.reference['answer']}</answer>"
    responses = [truth] if i % 4 else [wrong] if i % 8 else ["no answer tags"]
    lines.append({"id": it.id, "responses": responses})
  predictions = tmp_path / "p.jsonl"
  predictions.write_text("\n".join(json.dumps(x) for x in lines))
  out = tmp_path / "scored.jsonl"
  cli.main(["score", "--suite", "reasoning_gym", "--predictions", str(predictions),
            "--out", str(out)])
  summary = json.loads((tmp_path / "scored.summary.json").read_text())["suites"]["reasoning_gym"]
  assert (summary["value"], summary["n"], summary["no_answer"]) == (12 / 16, 16, 2)
  assert len(out.read_text().splitlines()) == 16


def test_unknown_prediction_id_is_an_error(tmp_path):
  predictions = tmp_path / "p.jsonl"
  predictions.write_text(json.dumps({"id": "word_sorting/999", "responses": ["x"]}))
  with pytest.raises(ValueError, match="not items of reasoning_gym"):
    cli.main(["score", "--suite", "reasoning_gym", "--predictions", str(predictions),
              "--out", str(tmp_path / "o.jsonl")])
