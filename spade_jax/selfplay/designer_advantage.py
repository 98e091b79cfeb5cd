"""How the delayed designer samples of one refresh become GRPO rows (`selfplay.designer_advantage`).

The trainer normalises rewards within a group (rl/advantages.py); this module decides which
designs get a row, with which reward, in which group, and with which additive advantage term:

  discard    the paper: invalid designs give no row; the valid designs of a refresh form one
             group, so regret is normalised among them alone (regret 0 next to regret 0.3 is
             pushed down, not up).
  penalty    invalid designs get `invalid_designer_reward` in the same group as the valid
             ones: the validity contrast dominates the advantage and differences in regret
             between valid designs move it little (issue 26's example).
  two_level  every design gets a row; the advantage is validity_weight * z(valid) over the
             refresh's designs plus the regret normalised among the valid designs only (the
             invalid rows, at `invalid_designer_reward`, sit in a group of their own with
             equal rewards, so that part is 0 for them). Regret differences keep their full
             weight and an all-invalid refresh still says nothing (z of a constant is 0).

A valid design whose environment has no regret (an arm without a playable episode) never gets
a row in any mode. With `designer_group_by_category` the group is (refresh, category) instead
of the refresh. The validity z-score uses the population std plus VALIDITY_EPS. Each choice is
one function in the `DESIGNER_ADVANTAGES` registry, whose names config.py accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np

from spade_jax.selfplay.schedule import PendingDesign, ScoredDesign

VALIDITY_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class DesignerTarget:
  """One designer row: the trainer normalises `reward` within `group`, then adds `offset`."""

  design: PendingDesign
  reward: float
  group: str
  offset: float = 0.0


def group_key(design: PendingDesign, by_category: bool) -> str:
  base = f"designer/{design.refresh_step}"
  return f"{base}/{design.category}" if by_category else base


def designer_targets(scored: Iterable[ScoredDesign], mode: str, *, by_category: bool = False,
                     invalid_reward: float = -1.0,
                     validity_weight: float = 1.0) -> list[DesignerTarget]:
  """The rows of the scored designs under `mode`, a name in DESIGNER_ADVANTAGES."""
  if mode not in DESIGNER_ADVANTAGES:
    raise ValueError(f"config.selfplay.designer_advantage={mode!r}: expected one of "
                     f"{tuple(DESIGNER_ADVANTAGES)}")
  rows = [s for s in scored if not s.valid or s.reward is not None]  # unmeasured: no row
  return DESIGNER_ADVANTAGES[mode](rows, _Options(by_category, invalid_reward, validity_weight))


@dataclasses.dataclass(frozen=True)
class _Options:
  by_category: bool
  invalid_reward: float
  validity_weight: float


def _discard(rows: list[ScoredDesign], o: _Options) -> list[DesignerTarget]:
  """The paper: valid designs only, their regret normalised among themselves."""
  return [DesignerTarget(s.design, s.reward, group_key(s.design, o.by_category))
          for s in rows if s.valid]


def _penalty(rows: list[ScoredDesign], o: _Options) -> list[DesignerTarget]:
  """Invalid designs at `invalid_reward` in the valid designs' group."""
  return [DesignerTarget(s.design, s.reward if s.valid else o.invalid_reward,
                         group_key(s.design, o.by_category)) for s in rows]


def _two_level(rows: list[ScoredDesign], o: _Options) -> list[DesignerTarget]:
  """A validity term as an offset, regret normalised in a group of the valid designs only."""
  offsets = _validity_terms(rows, o.by_category, o.validity_weight)
  return [DesignerTarget(s.design, s.reward if s.valid else o.invalid_reward,
                         f"{group_key(s.design, o.by_category)}/"
                         f"{'valid' if s.valid else 'invalid'}", offset)
          for s, offset in zip(rows, offsets, strict=True)]


def _validity_terms(rows: list[ScoredDesign], by_category: bool, weight: float) -> list[float]:
  """weight * (v - mean v) / (std v + eps) within each group, v = 1 for a valid design."""
  keys = [group_key(s.design, by_category) for s in rows]
  valid = np.array([float(s.valid) for s in rows])
  out = np.zeros(len(rows))
  for key in set(keys):
    idx = np.array([i for i, k in enumerate(keys) if k == key])
    v = valid[idx]
    out[idx] = weight * (v - v.mean()) / (v.std() + VALIDITY_EPS)
  return out.tolist()


# The registry `selfplay.designer_advantage` names (config.py checks the name against it).
Choice = Callable[[list[ScoredDesign], _Options], list[DesignerTarget]]
DESIGNER_ADVANTAGES: dict[str, Choice] = {
    "discard": _discard, "penalty": _penalty, "two_level": _two_level}
