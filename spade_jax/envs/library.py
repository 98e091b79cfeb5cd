"""The seed library: hand-written environments with privileged hints.

The seeds serve two purposes in SPADE: they are the fixed environment set of the
fixed-environment GRPO baseline, and they fill the designer's environment memory before
the first designed environment exists. Each seed is one standalone source file that obeys
the environment contract (`spade_jax/sandbox/contract.py`); `manifest.json` beside the
files carries what the file cannot: its kind, skill category, hint and description.

Plain Python: this module never imports jax or the model.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterable

SEEDS_DIR = pathlib.Path(__file__).parent / "seeds"
MANIFEST = SEEDS_DIR / "manifest.json"
KINDS = ("games", "tool_use")
GAME_CATEGORIES = ("deduction", "planning", "spatial", "arithmetic", "induction", "probing")
TOOL_CATEGORIES = ("lookup", "transaction", "scheduling", "data_transform")
_FIELDS = ("name", "file", "kind", "category", "hint", "description")
# The held-out split: one game per category that training can exclude from the memory and
# the replays (config.eval.hold_out_seed_games); evaluation plays them (seed_games_heldout).
HELDOUT_GAMES = ("liar", "hanoi", "ice", "crt", "cipher", "eggs")
SPLITS = ("all", "train", "heldout")


@dataclasses.dataclass(frozen=True)
class SeedEnv:
  """One seed environment: its source text plus the metadata from the manifest."""

  name: str
  kind: str  # "games" | "tool_use"
  category: str  # a GAME_CATEGORIES or TOOL_CATEGORIES name
  source: str  # the whole Python file, as the sandbox receives it
  hint: str  # privileged strategy text given to the hinted agent arm
  description: str


def _check_entry(index: int, entry: object) -> dict:
  where = f"{MANIFEST}: entry {index}"
  if not isinstance(entry, dict):
    raise ValueError(f"{where} must be an object, got {type(entry).__name__}")
  for field in _FIELDS:
    if not isinstance(entry.get(field), str) or not entry[field]:
      raise ValueError(f"{where} ({entry.get('name')!r}): field {field!r} must be a non-empty "
                       "string")
  allowed = GAME_CATEGORIES if entry["kind"] == "games" else TOOL_CATEGORIES
  if entry["kind"] not in KINDS:
    raise ValueError(f"{where} ({entry['name']!r}): kind {entry['kind']!r} is not one of {KINDS}")
  if entry["category"] not in allowed:
    raise ValueError(f"{where} ({entry['name']!r}): category {entry['category']!r} is not one "
                     f"of {allowed}")
  if not (SEEDS_DIR / entry["file"]).is_file():
    raise ValueError(f"{where} ({entry['name']!r}): file {entry['file']!r} does not exist under "
                     f"{SEEDS_DIR}")
  return entry


def read_manifest() -> list[dict]:
  """The checked manifest entries, in file order; names are unique."""
  entries = [_check_entry(i, e) for i, e in enumerate(json.loads(MANIFEST.read_text()))]
  names = [e["name"] for e in entries]
  repeated = sorted({n for n in names if names.count(n) > 1})
  if repeated:
    raise ValueError(f"{MANIFEST}: repeated seed names {repeated}")
  return entries


def load_seed_library(kind: str | None = None, categories: Iterable[str] | None = None,
                      split: str = "all") -> list[SeedEnv]:
  """Seeds of one kind (None = both) whose category is in `categories` (None = all).

  split: "all"; "train" leaves out HELDOUT_GAMES; "heldout" keeps only them.
  """
  if kind is not None and kind not in KINDS:
    raise ValueError(f"kind={kind!r} is not one of {KINDS} (or None for both)")
  if split not in SPLITS:
    raise ValueError(f"split={split!r} is not one of {SPLITS}")
  wanted = None if categories is None else set(categories)
  if wanted is not None:
    unknown = wanted - set(GAME_CATEGORIES) - set(TOOL_CATEGORIES)
    if unknown:
      raise ValueError(f"unknown categories {sorted(unknown)}; known: "
                       f"{GAME_CATEGORIES + TOOL_CATEGORIES}")
  seeds = []
  for entry in read_manifest():
    held_out = entry["name"] in HELDOUT_GAMES
    if split != "all" and held_out != (split == "heldout"):
      continue
    if (kind is None or entry["kind"] == kind) and (wanted is None or entry["category"] in wanted):
      source = (SEEDS_DIR / entry["file"]).read_text()
      seeds.append(SeedEnv(entry["name"], entry["kind"], entry["category"], source,
                           entry["hint"], entry["description"]))
  return seeds
