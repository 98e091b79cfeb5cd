"""`config.engine`: the rollout engine's capacity, one frozen struct with every default.

`SlotConversationEngine` and `SlotEngine` take their constructor defaults from these fields,
and so do the command lines that build an engine (`python -m spade_jax.eval run`), so a
default is written here and nowhere else. docs/engine.md, "Capacity", explains the sizes.
"""

from __future__ import annotations

import dataclasses

from spade_jax.checks import require, require_int, require_sizes


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """The engine's slots, cache length, prefill buckets and decode windows."""

  num_slots: int = 64  # concurrent conversations (KV-cache rows)
  max_cache_len: int = 8192  # tokens per conversation: prompt + every turn
  prefill_buckets: tuple[int, ...] = (256, 1024, 4096)  # padded prefill lengths (one compile each)
  decode_steps_per_poll: int = 16  # decode steps per poll() between host checks
  # Capacities the decode state is resized between (one compile of each call per pair); None:
  # the engine's defaults (docs/engine.md, "Capacity"). Fewer sizes, fewer compiles.
  decode_widths: tuple[int, ...] | None = None  # slot counts, e.g. (16, 64)
  decode_lengths: tuple[int, ...] | None = None  # entries a slot, e.g. (2048, 4096)
  # Entries an append's attention reads (one compile of each append per length); None: the
  # decode_lengths. With one decode capacity (decode_widths = decode_lengths = ()), these
  # alone keep appends onto short conversations from reading the whole row.
  append_lengths: tuple[int, ...] | None = None  # e.g. (4096, 8192)
  # Tokens one prefill call holds: each prefill bucket then runs at one row count,
  # prefill_tokens // bucket (at least 1), and compiles once per append length. None: rows in
  # powers of four up to num_slots (fewer padded rows, more compiles).
  prefill_tokens: int | None = None
  # Chips one copy of the engine's weights splits over (tensor parallel within the group,
  # model.sharding.engine_mesh): the slice's chips form groups of this many, each a replica
  # serving its share of the slots, so a decode step's collectives stay within a group; a
  # slice of fewer chips holds one copy over all. 0: one copy over the trainer's model axes.
  replica_chips: int = 0

  def __post_init__(self):
    for name in ("num_slots", "max_cache_len", "decode_steps_per_poll"):
      require_int(getattr(self, name), f"engine.{name}", 1)
    require_int(self.replica_chips, "engine.replica_chips", 0)
    if self.prefill_tokens is not None:
      require_int(self.prefill_tokens, "engine.prefill_tokens", 1)
    for name in ("decode_widths", "decode_lengths", "append_lengths"):
      require_sizes(getattr(self, name), f"engine.{name}", optional=True)
    require_sizes(self.prefill_buckets, "engine.prefill_buckets")
    require(self.prefill_buckets[-1] <= self.max_cache_len, "engine.prefill_buckets",
            self.prefill_buckets,
            f"increasing positive lengths <= engine.max_cache_len={self.max_cache_len}")
