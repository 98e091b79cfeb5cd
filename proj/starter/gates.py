"""The warm start's gates (issue 49 point 4), from `minigames_heldout` evaluation records.

Before the learning matrix runs on a warm-started starter, its held-out play must show that
the new family is one where the hint matters and that nothing old was lost:

- `unhinted`: the family's mean no-hint return inside UNHINTED (room to learn, not hopeless);
- `gap_informative` >= MIN_GAP: designs whose hint carries the strategy
  (`minigames.hint_carries_strategy`) score that much more with it;
- `gap_uninformative` <= MAX_GAP: designs whose hint only restates the rule do not;
- `retest_r` >= MIN_RETEST: a design's regret (its mean hint gap) correlates with itself
  between two evaluations at other sampling seeds, so regret ranks designs, not noise;
- `old_drop` <= MAX_DROP for every other family: its mean no-hint return fell at most that
  much from the source build's.

Records are the JSON lines `python -m proj.starter eval` writes (`spade_jax.eval run` on the
suite); ids are "<game uid>/<reset seed>".
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from proj.starter import heldout, minigames
from spade_jax.eval.suite import ItemRecord
from spade_jax.eval.suites.seed_games import arm_mean

UNHINTED = (0.2, 0.55)
MIN_GAP = 0.3
MAX_GAP = 0.05
MIN_RETEST = 0.5
MAX_DROP = 0.03


class RecordsError(ValueError):
  """An evaluation file that cannot be read as records."""


def read_records(path: str | pathlib.Path) -> list[ItemRecord]:
  """The records of one evaluation file (one JSON object a line, as `eval --out` writes)."""
  records = []
  for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
    try:
      row = json.loads(line)
      records.append(ItemRecord(**{k: v for k, v in row.items() if k != "suite"}))
    except (ValueError, TypeError) as err:
      raise RecordsError(f"{path}:{n}: not an evaluation record ({err})") from None
  return records


def _by_game(records: list[ItemRecord]) -> dict[str, list[ItemRecord]]:
  out: dict[str, list[ItemRecord]] = {}
  for r in records:
    out.setdefault(r.id.rsplit("/", 1)[0], []).append(r)
  return out


def _mean(values: list[float | None]) -> float | None:
  kept = [v for v in values if v is not None]
  return float(np.mean(kept)) if kept else None


def _gap(records: list[ItemRecord]) -> float | None:
  """Mean hint-minus-no-hint return over records scored in both arms."""
  pairs = [(arm_mean(r, "hint"), arm_mean(r, "no_hint")) for r in records]
  return _mean([h - n for h, n in pairs if h is not None and n is not None])


def _no_hint(records: list[ItemRecord]) -> float | None:
  return _mean([arm_mean(r, "no_hint") for r in records])


def _told(game: minigames.Minigame) -> bool:
  return minigames.hint_carries_strategy(game.family, game.source, game.hint)


def gates(warm: list[ItemRecord], retest: list[ItemRecord],
          source: list[ItemRecord], *, family: str = "peek",
          split: str = "minigames_heldout") -> dict[str, Any]:
  """Every gate's figure and verdict; "passed" when all hold. `warm` and `retest`: the warm
  start's records at two sampling seeds; `source`: the build it started from."""
  games = heldout.split_games(heldout.SPLIT_SEEDS[split])
  warm_games, retest_games = _by_game(warm), _by_game(retest)
  mine = {uid: rs for uid, rs in warm_games.items() if games[uid].family == family}
  told = [r for uid, rs in mine.items() if _told(games[uid])
          for r in rs]
  untold = [r for uid, rs in mine.items() if not _told(games[uid])
            for r in rs]
  paired = [(_gap(rs), _gap(retest_games.get(uid, []))) for uid, rs in mine.items()]
  regrets = np.array([p for p in paired if None not in p], float).reshape(-1, 2)
  retest_r = (float(np.corrcoef(regrets[:, 0], regrets[:, 1])[0, 1])
              if len(regrets) > 2 and regrets.std(axis=0).min() > 0 else None)
  source_games = _by_game(source)
  drops = {}
  for other in sorted({g.family for g in games.values()} - {family}):
    now = _no_hint([r for uid, rs in warm_games.items() if games[uid].family == other
                    for r in rs])
    before = _no_hint([r for uid, rs in source_games.items() if games[uid].family == other
                       for r in rs])
    drops[other] = None if now is None or before is None else before - now
  figures = {"unhinted": _no_hint([r for rs in mine.values() for r in rs]),
             "gap_informative": _gap(told), "gap_uninformative": _gap(untold),
             "retest_r": retest_r, "old_drop": drops}
  held = {
      "unhinted": figures["unhinted"] is not None
      and UNHINTED[0] < figures["unhinted"] < UNHINTED[1],
      "gap_informative": (figures["gap_informative"] or -1.0) >= MIN_GAP,
      "gap_uninformative": figures["gap_uninformative"] is not None
      and figures["gap_uninformative"] <= MAX_GAP,
      "retest_r": (retest_r if retest_r is not None else -1.0) >= MIN_RETEST,
      "old_drop": bool(drops) and all(d is not None and d <= MAX_DROP for d in drops.values())}
  return {**figures, "held": held, "passed": all(held.values())}
