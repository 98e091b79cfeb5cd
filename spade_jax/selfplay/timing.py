"""Wall-clock accounting of a self-play step: time spent in the engine, the sandbox, training."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator


class Timings:
  """Accumulates seconds per phase ("generate_s", "sandbox_s", "train_s", ...)."""

  def __init__(self):
    self.seconds: dict[str, float] = collections.defaultdict(float)

  @contextlib.contextmanager
  def phase(self, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
      yield
    finally:
      self.seconds[name] += time.perf_counter() - start

  def as_dict(self) -> dict[str, float]:
    return dict(self.seconds)
