"""`warm`: the rehearsal draw, the family filter of the minigame stream, and the command's
refusals (the warm start itself runs from the CI build in test_build.py, `make test-slow`)."""

import itertools
import json

import pytest

from proj.starter import variants, warm
from proj.starter.__main__ import main as starter_main

OLD = [{"tokens": [i], "loss_mask": [1], "role": "agent"} for i in range(40)]


@pytest.mark.parametrize(("new", "share", "drawn"), [(10, 0.5, 10), (30, 0.25, 10), (60, 0.5, 40),
                                                     (10, 0.0, 0)])
def test_rehearsal_rows_are_the_share_of_the_set_drawn_once_each_in_order(new, share, drawn):
  rows = warm.rehearsal_rows(OLD, new, share, seed=3)
  assert len(rows) == drawn and all(r["rehearsal"] for r in rows)
  picked = [r["tokens"][0] for r in rows]
  assert picked == sorted(set(picked)) and set(picked) <= set(range(40))
  assert rows == warm.rehearsal_rows(OLD, new, share, seed=3)
  if 0 < drawn < len(OLD):
    assert rows != warm.rehearsal_rows(OLD, new, share, seed=4)


@pytest.mark.parametrize("share", [1.0, -0.1])
def test_a_share_outside_zero_to_one_is_refused(share):
  with pytest.raises(warm.ShareError, match=rf"^--rehearsal {share}: a share in \[0, 1\)$"):
    warm.rehearsal_rows(OLD, 10, share, seed=0)


def test_the_minigame_stream_keeps_the_named_families_only():
  games = list(itertools.islice(variants.minigame_candidates(0, families=("peek",)), 12))
  assert len(games) == 12 and {g.base for g in games} == {"peek"}
  with pytest.raises(ValueError, match=r"^families \['dice'\]: minigame families are some of"):
    variants.build_env_set("unused.jsonl", kind="minigames", families=("dice",))
  with pytest.raises(ValueError, match=r"for the minigames kind only$"):
    variants.build_env_set("unused.jsonl", kind="variants", families=("peek",), words=("go",))


def test_warm_refuses_a_directory_that_is_no_build_and_a_bad_share_in_one_line(tmp_path,
                                                                             capsys):
  assert starter_main(["warm", "--from", str(tmp_path / "none"), "--out",
                       str(tmp_path / "w")]) == 2
  assert capsys.readouterr().err.splitlines() == [
      f"error: --from {tmp_path / 'none'}: not a finished starter build (no config.json and "
      "build.json)"]
  built = tmp_path / "built"
  built.mkdir()
  (built / "config.json").write_text("{}")
  (built / "build.json").write_text(json.dumps({"size": "ci"}))
  assert starter_main(["warm", "--from", str(built), "--out", str(tmp_path / "w"),
                       "--rehearsal", "1.5", "--config", "starter_ci"]) == 2
  assert capsys.readouterr().err.splitlines() == ["error: --rehearsal 1.5: a share in [0, 1)"]
