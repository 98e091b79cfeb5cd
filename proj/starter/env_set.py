"""The starter's environment set on disk: one `VariantEnv` a JSONL line, each with a digest.

Lines are appended (and synced) as variants pass validation, so a killed build leaves a
valid prefix plus at most one damaged trailing line: `read_env_set` drops that line with a
one-line warning (and `repair=True` cuts it off the file); damage anywhere else is an error
naming the file and line, never silently used.

Plain Python: this module never imports jax or the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import warnings
from collections.abc import Iterable

from proj.starter.minigames import FAMILIES
from spade_jax.envs.library import HELDOUT_GAMES

_FIELDS = ("uid", "base", "category", "source", "hint")


@dataclasses.dataclass(frozen=True)
class VariantEnv:
  """One environment of the starter's set: a validated variant of a train-split seed game, or
  a validated minigame (proj/starter/minigames.py)."""

  uid: str  # "v/<seed name>/<index>" or "mg<seed>/<family>/<index>"
  base: str  # seed game name it came from, or the minigame family
  category: str  # the seed's skill category
  source: str  # the whole environment source
  hint: str  # privileged hint (the seed's, adapted where the variant changes what it says)


def _digest(row: dict) -> str:
  return hashlib.sha256(json.dumps([row[f] for f in _FIELDS]).encode()).hexdigest()


def encode_line(env: VariantEnv) -> str:
  row = dataclasses.asdict(env)
  return json.dumps({**row, "sha256": _digest(row)}, ensure_ascii=False) + "\n"


def _decode_line(line: str) -> VariantEnv:
  """The line's VariantEnv; raises ValueError saying what is wrong with it."""
  try:
    row = json.loads(line)
  except ValueError as exc:
    raise ValueError(f"not JSON ({exc})") from None
  if not isinstance(row, dict) or not all(isinstance(row.get(f), str) for f in _FIELDS):
    raise ValueError(f"expected an object with the string fields {_FIELDS}")
  if row.get("sha256") != _digest(row):
    raise ValueError("its sha256 does not match its fields (edited or damaged)")
  env = VariantEnv(*(row[f] for f in _FIELDS))
  variant = env.uid.startswith(f"v/{env.base}/") and env.base not in HELDOUT_GAMES
  minigame = env.base in FAMILIES and env.uid.split("/")[1:2] == [env.base]
  if not (variant or minigame) or not env.uid.startswith(("v/", "mg")):
    raise ValueError(f"uid {env.uid!r} / base {env.base!r} is neither a train-split variant "
                     "nor a minigame")
  return env


def read_env_set(path: str | os.PathLike, *, repair: bool = False) -> list[VariantEnv]:
  """The set at `path` ([] if there is no file); see the module docstring for damage."""
  path = pathlib.Path(path)
  if not path.exists():
    return []
  data = path.read_bytes()
  lines = data.split(b"\n")
  envs, offset = [], 0
  for number, raw in enumerate(lines, start=1):
    if not raw.strip():
      offset += len(raw) + 1
      continue
    last = all(not rest.strip() for rest in lines[number:])
    try:
      envs.append(_decode_line(raw.decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
      if not last:
        raise ValueError(f"{path}: line {number} is damaged: {exc}") from None
      warnings.warn(f"{path}: dropping the damaged last line {number} ({exc})", stacklevel=2)
      if repair:
        with path.open("r+b") as f:
          f.truncate(offset)
      break
    offset += len(raw) + 1
  uids = [e.uid for e in envs]
  if len(set(uids)) != len(uids):
    raise ValueError(f"{path}: repeated uids")
  return envs


def append_env_set(path: str | os.PathLike, envs: Iterable[VariantEnv]) -> None:
  """Appends whole lines and syncs them to disk."""
  text = "".join(encode_line(e) for e in envs)
  if not text:
    return
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with path.open("a", encoding="utf-8") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
