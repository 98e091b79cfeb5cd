"""The check's inputs: user passages from JSONL (bad lines named) and the designer requests."""

import pytest

from proj.starter import __main__ as starter_cli
from proj.starter import check
from spade_jax.envs.library import load_seed_library
from spade_jax.selfplay.config import SelfPlayConfig


def test_read_passages_takes_text_fields_and_names_bad_lines(tmp_path):
  good = tmp_path / "p.jsonl"
  good.write_text('{"text": "Ohm\'s law."}\n\n{"text": "Snell", "id": 3}\n')
  assert check.read_passages(good) == ["Ohm's law.", "Snell"]
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"text": "ok"}\n{"body": "no text"}\n')
  with pytest.raises(ValueError, match="bad.jsonl:2"):
    check.read_passages(bad)
  empty = tmp_path / "empty.jsonl"
  empty.write_text('{"text": "  "}\n')
  with pytest.raises(ValueError, match="non-empty"):
    check.read_passages(empty)


def test_design_requests_cycle_categories_with_train_memory():
  selfplay = SelfPlayConfig(memory_sample_size=1)
  requests = check.design_requests(["x" * 900] * 8, selfplay, max_chars=600)
  assert [r.category for r in requests[:6]] == list(selfplay.skills)
  assert all(len(r.passage) == 600 and len(r.memory) == 1 for r in requests)
  assert all(r.memory[0].category == r.category for r in requests)
  many = check.design_requests(["p"] * 60, selfplay, max_chars=600)  # every seed in turn
  shown = {r.memory[0].source for r in many}
  assert shown == {s.source for s in load_seed_library("games", split="train")}


def test_check_of_a_missing_directory_is_one_error_line(tmp_path, capsys):
  assert starter_cli.main(["check", str(tmp_path / "missing"), "--quiet"]) == 2
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and err[0].startswith("error: tokenizer ") and "missing" in err[0], err
