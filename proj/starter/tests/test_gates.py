"""The warm start's gates (gates.py) on made-up records of the held-out split: a warm start
that passes them all, and one change each that fails its gate alone."""

import json

import pytest

from proj.starter import __main__ as starter_cli
from proj.starter import build, gates, heldout, minigames
from proj.starter.__main__ import main as starter_main
from spade_jax.eval.__main__ import build_parser
from spade_jax.eval.suite import ItemRecord
from spade_jax.model import get_preset, save_pretrained
from spade_jax.model.testing import random_model

GAMES = heldout.split_games(heldout.SPLIT_SEEDS["minigames_heldout"])


def _records(no_hint, hint):
  """A record per game and reset seed, one episode an arm: no_hint(game, i) and
  hint(game, i) give the returns of the i-th game of its family."""
  out, index = [], {}
  for uid, game in GAMES.items():
    i = index[game.family] = index.get(game.family, -1) + 1
    for seed in heldout.RESET_SEEDS:
      out.append(ItemRecord(f"{uid}/{seed}", None, ["", ""], [None, None],
                            [no_hint(game, i), hint(game, i)], None,
                            details=["no_hint", "hint"]))
  return out


def _told(game):
  return minigames.hint_carries_strategy(game.family, game.source, game.hint)


def _hint(game, i):  # a told peek game gains 0.4 to 0.85 with its hint, an untold one nothing
  return 0.3 + (0.4 + 0.05 * i) * _told(game) if game.family == "peek" else 0.6


NO_HINT = lambda game, i: 0.3 if game.family == "peek" else 0.6  # noqa: E731
WARM = _records(NO_HINT, _hint)
SOURCE = _records(lambda game, i: 0.3 if game.family == "peek" else 0.62, _hint)


def test_a_warm_start_that_holds_every_gate_passes():
  result = gates.gates(WARM, WARM, SOURCE)
  assert result["passed"], result
  assert result["unhinted"] == pytest.approx(0.3)
  assert result["gap_uninformative"] == pytest.approx(0.0)
  assert result["gap_informative"] >= 0.4 and result["retest_r"] == pytest.approx(1.0)
  assert set(result["old_drop"]) == set(minigames.FAMILIES) - {"peek"}
  assert all(d == pytest.approx(0.02) for d in result["old_drop"].values())


@pytest.mark.parametrize("gate", ["unhinted", "gap_informative", "gap_uninformative",
                                  "retest_r", "old_drop"])
def test_each_gate_fails_alone(gate):
  warm, retest, source = WARM, WARM, SOURCE
  if gate == "unhinted":  # hopeless without the hint: 0.1
    warm = retest = _records(lambda g, i: 0.1 if g.family == "peek" else 0.6,
                             lambda g, i: _hint(g, i) - 0.2 * (g.family == "peek"))
  elif gate == "gap_informative":  # the strategy is worth 0 to 0.45, 0.225 on average
    warm = retest = _records(NO_HINT, lambda g, i: _hint(g, i) - 0.4 * _told(g))
  elif gate == "gap_uninformative":  # a hint that only restates the rule is worth 0.2
    warm = retest = _records(NO_HINT, lambda g, i: _hint(g, i) + 0.2 * (
        g.family == "peek" and not _told(g)))
  elif gate == "retest_r":  # the second evaluation gives the untold designs the regret
    retest = _records(NO_HINT, lambda g, i: 0.3 + 0.6 * (not _told(g))
                      if g.family == "peek" else 0.6)
  else:  # an old family lost 0.1
    source = _records(lambda g, i: 0.3 if g.family == "peek" else 0.7, _hint)
  result = gates.gates(warm, retest, source)
  assert [name for name, held in result["held"].items() if not held] == [gate], result
  assert not result["passed"]


def test_the_gates_command_prints_the_result_and_fails_with_a_gate(tmp_path, capsys):
  files = {}
  for name, records in (("warm", WARM), ("retest", WARM), ("source", SOURCE),
                        ("worse", _records(lambda g, i: 0.3 if g.family == "peek" else 0.7,
                                           _hint))):
    files[name] = tmp_path / f"{name}.jsonl"
    files[name].write_text("".join(json.dumps(r.to_json("minigames_heldout")) + "\n"
                                   for r in records))
  for source, code in (("source", 0), ("worse", 1)):
    assert starter_main(["gates", "--warm", str(files["warm"]), "--retest",
                         str(files["retest"]), "--source", str(files[source])]) == code
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert printed["passed"] is (code == 0) and printed["held"]["old_drop"] is (code == 0)


def test_eval_plays_as_the_starter_loop_unless_told_otherwise(monkeypatch):
  """`eval`'s defaults are configs/starter.py's agent sampling and engine sizes; a flag given
  again wins."""
  seen = []
  monkeypatch.setattr(starter_cli, "eval_main", seen.append)
  assert starter_main(["eval", "--checkpoint", "ckpt", "--temperature", "1.0"]) == 0
  args = build_parser().parse_args(seen[0])
  cfg = build.load_experiment("starter")
  assert (args.suite, args.temperature, args.max_new_tokens) == (
      "minigames_heldout", 1.0, cfg.eval.max_new_tokens)
  assert (args.num_slots, args.max_cache_len, tuple(args.prefill_buckets)) == (
      cfg.engine.num_slots, cfg.engine.max_cache_len, cfg.engine.prefill_buckets)
  assert (cfg.eval.temperature, cfg.eval.max_new_tokens) == (0.3, 48)


@pytest.mark.slow  # an evaluation run; tests/eval/test_eval_run.py runs one in `make test`
def test_eval_writes_the_records_the_gates_read(tmp_path):
  """`python -m proj.starter eval` on a random tiny model: minigames_heldout records whose ids
  name the split's games, one episode an arm; the gates read them and, on so few, fail."""
  ckpt = tmp_path / "tiny"
  save_pretrained(random_model(get_preset("tiny")), ckpt)
  out = tmp_path / "warm.jsonl"
  assert starter_main(["eval", "--checkpoint", str(ckpt), "--tokenizer", "tiny", "--limit", "2",
                       "--samples", "1", "--max-new-tokens", "4", "--num-slots", "4",
                       "--max-cache-len", "1024", "--prefill-buckets", "512", "--out", str(out),
                       "--quiet"]) == 0
  assert [json.loads(x)["suite"] for x in out.read_text().splitlines()] == [
      "minigames_heldout"] * 2
  records = gates.read_records(out)
  assert all(r.id.rsplit("/", 1)[0] in GAMES and sorted(r.details) == ["hint", "no_hint"]
             for r in records)
  result = gates.gates(records, records, records)
  assert not result["passed"] and result["old_drop"]


def test_a_damaged_records_file_is_one_line(tmp_path, capsys):
  good = tmp_path / "warm.jsonl"
  good.write_text(json.dumps(WARM[0].to_json("minigames_heldout")) + "\n")
  bad = tmp_path / "source.jsonl"
  bad.write_text(json.dumps(WARM[0].to_json("minigames_heldout")) + "\n{\"id\": \"cut\n")
  assert starter_main(["gates", "--warm", str(good), "--retest", str(good), "--source",
                       str(bad)]) == 2
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and err[0].startswith(f"error: {bad}:2: not an evaluation record ("), err
