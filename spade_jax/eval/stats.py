"""Summary statistics of a suite: the mean with its standard error, the summary record."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Summary:
  """One suite's result: `value` of `metric` over `n` items, with its standard error.

  `no_answer` counts samples without an extractable answer (they scored 0); `unscored`
  counts items left out because the sandbox failed (never scored 0 silently); `extra`
  holds further figures (pass@k, per-category values).
  """

  suite: str
  metric: str
  value: float
  n: int
  stderr: float
  no_answer: int = 0
  unscored: int = 0
  extra: dict = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
  """Mean and standard error of the mean (sample std / sqrt(n)); (nan, nan) for no values."""
  if not values:
    return math.nan, math.nan
  x = np.asarray(values, np.float64)
  err = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
  return float(x.mean()), err
