"""The engine's capacity ladders: the cache lengths a decode block runs at, the windows an
append reads, the row counts a prefill call is padded to, and the step's largest append.

Plain functions of the engine's sizes (no model, no arrays), so `SlotEngine` and the memory
plan (spade_jax.plan, which builds no engine) derive the same shapes from one definition.
"""

from __future__ import annotations

from collections.abc import Sequence

from spade_jax.engine.config import EngineConfig
from spade_jax.engine.state import pick_bucket, row_buckets


def geometric_lengths(full: int) -> list[int]:
  """Default cache lengths: 2^k and 3 * 2^(k-1) from the smallest power of two >= full / 16
  (and >= 64).

  Attention reads the whole length, so a finer ladder reads fewer unused entries (at most
  half as many as needed, with these) but compiles each call at more shapes; this one keeps
  about eight lengths whatever the cache size, and runs bench/rollout.py faster than
  (full/4, full/2, full).
  """
  low = max(64, 1 << max(full // 16 - 1, 0).bit_length())
  return [n for k in range(low.bit_length() - 1, full.bit_length())
          for n in (2 ** k, 3 * 2 ** k // 2) if low <= n < full]


def cache_lengths(full: int, decode_lengths: Sequence[int] | None,
                  append_lengths: Sequence[int] | None) -> tuple[tuple[int, ...], ...]:
  """(decode lengths, append lengths): the cache lengths a decode block runs at and the
  windows an append's attention reads, each ending at `full` (max_cache_len plus the largest
  prefill bucket); None takes the defaults (appends read at the decode lengths)."""
  decode = buckets(decode_lengths, full, geometric_lengths(full))
  return decode, decode if append_lengths is None else buckets(append_lengths, full, ())


def append_row_counts(chunk: int, num_slots: int, batch_shards: int,
                      prefill_tokens: int | None) -> tuple[int, ...]:
  """Row counts a prefill call of `chunk`-token pieces is padded to. With `prefill_tokens`,
  one: that many tokens' worth of rows (at most num_slots, at least one, rounded up to the
  batch shards), so each bucket compiles once per append length and a call's size stays
  bounded; else `row_buckets`."""
  if prefill_tokens is None:
    return row_buckets(num_slots, batch_shards)
  rows = min(max(prefill_tokens // chunk, 1), num_slots)
  return (-(-rows // batch_shards) * batch_shards,)


def largest_append(engine: EngineConfig, prompts: int, batch_shards: int
                   ) -> tuple[int, int, int]:
  """(rows, chunk, read length) of a step's largest append: `prompts` prompts (one refresh's
  designer prompts, at most one call's rows) in pieces of the largest prefill bucket, the
  first piece of each; what `plan` counts and `plan --compile` compiles."""
  chunk = max(engine.prefill_buckets)
  counts = append_row_counts(chunk, engine.num_slots, batch_shards, engine.prefill_tokens)
  _, lengths = cache_lengths(engine.max_cache_len + chunk, engine.decode_lengths,
                             engine.append_lengths)
  return pick_bucket(min(prompts, counts[-1]), counts), chunk, pick_bucket(chunk, lengths)


def buckets(given: Sequence[int] | None, full: int, default: Sequence[int]) -> tuple[int, ...]:
  """Sorted capacity sizes below `full`, then `full` itself."""
  sizes = default if given is None else given
  return tuple(sorted({int(b) for b in sizes if 0 < b < full})) + (full,)
