"""The Fixed-env RLVE baseline's adaptive difficulty: one sliding level window per environment.

Follows RLVE's published rule (Zeng et al., 2025; repository Zhiyuan-Zeng/RLVE, file
`slime/ray/rollout_data_source.py`, class `RLVEManager`, with the defaults of
`slime/utils/arguments.py`):

* every environment has an upper difficulty bound h, starting at 0;
* a problem's difficulty is drawn uniformly from the window
  [max(0, h - WINDOW_SIZE + 1), h] (`difficulty_sliding_window_size` = 4);
* only episodes played at difficulty h count towards the accuracy check;
* once at least MIN_PROMPTS x group_size such episodes have been collected
  (`min_prompts_before_difficulty_check` = 8 prompts of `n_samples_per_prompt` samples; our
  prompt is one environment instance played G times), their mean return is compared with
  ACCURACY_THRESHOLD (`min_metric_to_increase_difficulty` = 0.9): at or above it, h rises by
  one; either way the counters restart.

Two differences from RLVE, both forced by the setting: h stops at the environment's last
declared level (RLVE's generators have no top), and a level is drawn per environment per
refresh window (the set is held for k steps) rather than per prompt. Accuracy is the no-hint
return (in [0, 1]; RLVE's accuracy is 0/1). Environments without declared levels are played
at their only level and never counted.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

WINDOW_SIZE = 4
MIN_PROMPTS = 8
ACCURACY_THRESHOLD = 0.9


class DifficultyWindows:
  """Per-environment upper bounds h and the accuracy counters at h (JSON state)."""

  def __init__(self, levels: Mapping[str, int], group_size: int):
    self.levels = dict(levels)  # uid -> number of declared levels (>= 2)
    self.min_episodes = MIN_PROMPTS * group_size
    self.upper = {uid: 0 for uid in self.levels}
    self._sum = {uid: 0.0 for uid in self.levels}
    self._count = {uid: 0 for uid in self.levels}

  def window(self, uid: str) -> tuple[int, int]:
    """(lowest, highest) level the environment is drawn from now."""
    h = self.upper[uid]
    return max(0, h - WINDOW_SIZE + 1), h

  def sample_level(self, uid: str, rng: np.random.Generator) -> int | None:
    """A level drawn uniformly from the window; None for an environment without levels."""
    if uid not in self.levels:
      return None
    low, high = self.window(uid)
    return int(rng.integers(low, high + 1))

  def record(self, uid: str, level: int | None, returns: list[float]) -> None:
    """Counts the no-hint returns of episodes played at the current upper bound."""
    if level is not None and uid in self.levels and level == self.upper[uid]:
      self._sum[uid] += float(sum(returns))
      self._count[uid] += len(returns)

  def update(self) -> dict[str, float]:
    """Checks every environment with enough episodes at h; returns uid -> accuracy checked."""
    checked = {}
    for uid, count in self._count.items():
      if count < self.min_episodes:
        continue
      accuracy = self._sum[uid] / count
      checked[uid] = accuracy
      if accuracy >= ACCURACY_THRESHOLD and self.upper[uid] < self.levels[uid] - 1:
        self.upper[uid] += 1
      self._sum[uid], self._count[uid] = 0.0, 0
    return checked

  def state_dict(self) -> dict:
    return {"upper": dict(self.upper), "sum": dict(self._sum), "count": dict(self._count)}

  def load_state_dict(self, state: Mapping) -> None:
    if set(state["upper"]) != set(self.levels):
      raise ValueError(f"RLVE state covers environments {sorted(state['upper'])}, this run has "
                       f"{sorted(self.levels)}")
    self.upper = {k: int(v) for k, v in state["upper"].items()}
    self._sum = {k: float(v) for k, v in state["sum"].items()}
    self._count = {k: int(v) for k, v in state["count"].items()}
