"""Designer rewards, registered by name (config.selfplay.designer_reward).

Both read an environment's `ArmReturns`: the returns of its surviving episodes in each arm,
one list per step it was played (the k steps between refreshes). Returns lie in [0, 1],
so both rewards lie in [-1, 1] / [0, 1], on the scale of the agent's reward.

  hint_regret             r_D(e) = mean return with hint - mean return without (the
                          paper's Eq. 3), pooled over every episode of the window.
  ema_learning_potential  4 m (1 - m), where m is an exponential moving average (weight
                          EMA_ALPHA on the newer step) of the per-step no-hint win rate over
                          the window. It peaks at m = 0.5 and vanishes on mastered (m = 1)
                          and hopeless (m = 0) environments: the learnability p(1 - p) of
                          prioritised replay, smoothed over time as the agent improves. It
                          uses only the no-hint arm, so it needs no hint.

A reward is None when an arm it needs has no surviving episode (all dropped for
infrastructure errors): such a designer sample is not trained, never scored as 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

EMA_ALPHA = 0.5


@dataclasses.dataclass
class ArmReturns:
  """Per-step episode returns of one environment, by arm."""

  no_hint: list[list[float]] = dataclasses.field(default_factory=list)
  hint: list[list[float]] = dataclasses.field(default_factory=list)

  def add_step(self, no_hint: list[float], hint: list[float]) -> None:
    self.no_hint.append([float(r) for r in no_hint])
    self.hint.append([float(r) for r in hint])

  def pooled_mean(self, arm: str) -> float | None:
    values = [r for step in getattr(self, arm) for r in step]
    return sum(values) / len(values) if values else None

  def state_dict(self) -> dict:
    return {"no_hint": self.no_hint, "hint": self.hint}

  def load_state_dict(self, state: dict) -> None:
    self.no_hint = [list(s) for s in state["no_hint"]]
    self.hint = [list(s) for s in state["hint"]]


def mean(values: list[float]) -> float | None:
  return sum(values) / len(values) if values else None


def hint_regret(returns: ArmReturns) -> float | None:
  with_hint, without = returns.pooled_mean("hint"), returns.pooled_mean("no_hint")
  if with_hint is None or without is None:
    return None
  return with_hint - without


def ema_learning_potential(returns: ArmReturns, alpha: float = EMA_ALPHA) -> float | None:
  rates = [m for m in map(mean, returns.no_hint) if m is not None]
  if not rates:
    return None
  ema = rates[0]
  for rate in rates[1:]:
    ema = (1.0 - alpha) * ema + alpha * rate
  return 4.0 * ema * (1.0 - ema)


DESIGNER_REWARDS: dict[str, Callable[[ArmReturns], float | None]] = {
    "hint_regret": hint_regret,
    "ema_learning_potential": ema_learning_potential,
}


def get_designer_reward(name: str) -> Callable[[ArmReturns], float | None]:
  if name not in DESIGNER_REWARDS:
    raise ValueError(f"config.selfplay.designer_reward={name!r}: expected one of "
                     f"{sorted(DESIGNER_REWARDS)}")
  return DESIGNER_REWARDS[name]
