"""`build --without FAMILY`: a build whose fine-tuning set leaves a minigame family out (the
source a `warm` start then teaches it to), and its refusals."""

import dataclasses
import itertools
import json

import pytest

from proj.starter import build, variants
from proj.starter.__main__ import main as starter_main

# Made-up one-piece action words for the seed-game variants (the envs stage reads them from
# the build's tokenizer, which this test does not train).
WORDS = tuple("w" + "".join(c) for c in itertools.product("abcdefgh", repeat=3))


def _small_build(out, monkeypatch, without=()):
  b = build.Build(out, "ci", config="starter", progress=False, without=without)
  b.size = dataclasses.replace(b.size, env_count=1, minigame_count=14)
  monkeypatch.setattr(b, "tokenizer", lambda: None)
  monkeypatch.setattr(variants, "action_words", lambda tok: WORDS)
  b.stages.mkdir(parents=True)
  return b


def test_the_envs_stage_leaves_the_named_family_out(tmp_path, monkeypatch):
  b = _small_build(tmp_path / "b", monkeypatch, without=("peek",))
  result = b._envs()
  games = variants.load_env_set(b.stages / build.ENV_FILES["minigames"])
  assert result["without"] == ["peek"] and len(games) == 14
  assert {g.base for g in games} == {"quiz", "guess", "sequence", "reach", "locate", "walk"}


def test_a_rerun_that_leaves_out_other_families_stops_before_training(tmp_path, monkeypatch,
                                                                      capsys):
  b = _small_build(tmp_path / "b", monkeypatch)
  (b.stages / "tokenizer").mkdir()
  (b.stages / "tokenizer" / "tokenizer.json").write_text("{}")
  for name, result in (("tokenizer", {}), ("envs", b._envs())):
    marker = {**result, **b._fingerprints(name)}
    (b.stages / f"{name}.done.json").write_text(json.dumps(marker))
  assert starter_main(["build", "--out", str(b.out), "--size", "ci", "--without", "peek",
                       "--quiet"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and "\n" not in err
  assert err.endswith("stage envs was built --without [], this run asks --without ['peek']: "
                      "use another --out")
  assert not (b.stages / "pretrain").exists()


def test_an_unknown_family_is_refused(tmp_path, capsys):
  with pytest.raises(ValueError, match=r"^--without \['dice'\]: minigame families are "):
    build.Build(tmp_path, "ci", config="starter", without=("dice",))
  with pytest.raises(SystemExit):
    starter_main(["build", "--out", str(tmp_path), "--without", "dice"])
  assert "invalid choice: 'dice'" in capsys.readouterr().err
