"""Deterministic seeds and generators derived from (run seed, step, purpose, ...).

Every random choice of the loop (categories, memory samples, reset seeds, sampling seeds)
draws from a generator derived from the run seed and the names of what it is for, never
from a generator carried across steps. A resumed run therefore needs no RNG state to make
the same choices as a run that never stopped.
"""

from __future__ import annotations

import zlib

import numpy as np


def _words(parts: tuple[int | str, ...]) -> list[int]:
  out = []
  for part in parts:
    if isinstance(part, str):
      out.append(zlib.crc32(part.encode("utf-8")))
    elif isinstance(part, (int, np.integer)) and part >= 0:
      out.append(int(part))
    else:
      raise TypeError(f"seed parts must be non-negative ints or str, got {part!r}")
  return out


def derive_seed(*parts: int | str) -> int:
  """A 31-bit seed that depends on every part (same parts, same seed)."""
  return int(np.random.SeedSequence(_words(parts)).generate_state(1)[0] >> 1)


def derive_rng(*parts: int | str) -> np.random.Generator:
  return np.random.default_rng(np.random.SeedSequence(_words(parts)))
