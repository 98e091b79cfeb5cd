"""Held-out minigames: unseen instances of the loop's families, played with and without the
hint, as evaluation suites the starter registers (registry.py).

`minigames_heldout` is the split to measure and choose by; `minigames_final` is kept
untouched for the final claim. Each draws its instances with its own seed (training draws
seed 0 for the fine-tuning set and seed 1 for the loop's library) and leaves out any whose
source (normalised) is one of the first `TRAINING_SCAN` seed-0 candidates or the library's,
so no held-out game is a training copy. Items: games of each of `FAMILIES` times the reset
seeds, as many as a standard error of at most `MAX_STDERR` needs on returns in [0, 1]
whatever they are (0.5 / sqrt(n) <= MAX_STDERR). Besides the mean no-hint return and the hint gap
(HeldoutGames), the summary reports pass@1: the share of no-hint episodes that earn the
whole return (1.0).
"""

from __future__ import annotations

import functools
import itertools
import math

from proj.starter import minigames
from proj.starter.variants import minigame_candidates, normalise_source
from spade_jax.eval import stats
from spade_jax.eval.suite import ItemRecord
from spade_jax.eval.suites.seed_games import HeldoutGames, arm_mean, arm_scores

SPLIT_SEEDS = {"minigames_heldout": 2, "minigames_final": 3}
FAMILIES = tuple(minigames.FAMILIES)
RESET_SEEDS = (2000, 2001, 2002, 2003)
MAX_STDERR = 0.03
# Games of each family: at least (0.5 / MAX_STDERR)^2 items a split.
INSTANCES = math.ceil((0.5 / MAX_STDERR) ** 2 / (len(FAMILIES) * len(RESET_SEEDS)))
TRAINING_SCAN = 2000  # seed-0 candidates a build can train on (a full build takes 360)
PASS_RETURN = 1.0 - 1e-6


@functools.cache
def _training_sources() -> frozenset[str]:
  scanned = itertools.islice(minigame_candidates(0), TRAINING_SCAN)  # skips the library's
  return frozenset(normalise_source(g.source) for g in scanned) | frozenset(
      normalise_source(g.source) for g in minigames.library())


@functools.cache
def split_games(seed: int) -> dict[str, minigames.Minigame]:
  """`INSTANCES` distinct games of each of FAMILIES drawn with `seed`, none a training
  source."""
  games, seen = {}, set(_training_sources())
  for family in FAMILIES:
    found = 0
    for index in itertools.count():
      game = minigames.minigame(family, index, seed)
      key = normalise_source(game.source)
      if key not in seen:
        seen.add(key)
        games[game.uid] = game
        found += 1
        if found == INSTANCES:
          break
  return games


class MinigamesHeldout(HeldoutGames):
  """One split of held-out minigames (a name of SPLIT_SEEDS)."""

  reset_seeds = RESET_SEEDS

  def __init__(self, name: str = "minigames_heldout"):
    if name not in SPLIT_SEEDS:
      raise ValueError(f"minigame split {name!r}: expected one of {sorted(SPLIT_SEEDS)}")
    self.name = name

  def games(self) -> dict[str, minigames.Minigame]:
    return split_games(SPLIT_SEEDS[self.name])

  def summarize(self, records: list[ItemRecord]) -> stats.Summary:
    summary = super().summarize(records)
    played = [s for r in records for s in arm_scores(r, "no_hint") if s is not None]
    if played:
      summary.extra["pass_at_1"] = sum(s >= PASS_RETURN for s in played) / len(played)
    summary.extra.update(self.family_returns(records))
    return summary

  def family_returns(self, records: list[ItemRecord]) -> dict[str, float]:
    """return_<family> and return_with_hint_<family>: each arm's mean over the family's
    scored items, so that a run on some families is read on those (issue 49 point 3)."""
    games, out = self.games(), {}
    for family in FAMILIES:
      mine = [r for r in records if r.score is not None
              and games[r.reference["game"]].family == family]
      for arm, key in (("no_hint", "return"), ("hint", "return_with_hint")):
        values = [v for v in (arm_mean(r, arm) for r in mine) if v is not None]
        if values:
          out[f"{key}_{family}"] = sum(values) / len(values)
    return out

