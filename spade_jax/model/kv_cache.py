"""Position-addressed KV cache: one pytree for prefill, decode and multi-turn append.

Each row of the cache is an append-only list of entries. An entry stores its key, value and
the position id of the token it came from; -1 marks an empty slot or a padding token. A
query at position p attends every entry of its own row with 0 <= pos <= p, so a left-padded
prompt, a one-token decode step and a new conversation turn are all the same call.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from spade_jax.model.config import ModelConfig


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """k, v: tuple over layers of [B, S, K, Hd]; pos: [B, S] int32; end: [B] int32."""

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  pos: jax.Array  # position id of each entry, -1 = empty or padding
  end: jax.Array  # next write index per row

  @classmethod
  def init(cls, cfg: ModelConfig, batch_size: int, max_len: int,
           dtype: jnp.dtype = jnp.float32) -> KVCache:
    """An empty cache holding up to `max_len` entries per row."""
    if batch_size < 1 or max_len < 1:
      raise ValueError(f"KVCache.init: batch_size={batch_size} and max_len={max_len} must be >= 1")
    shape = (batch_size, max_len, cfg.num_kv_heads, cfg.head_dim)
    zeros = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
    return cls(k=zeros, v=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)),
               pos=jnp.full((batch_size, max_len), -1, jnp.int32),
               end=jnp.zeros((batch_size,), jnp.int32))

  @property
  def batch_size(self) -> int:
    return self.pos.shape[0]

  @property
  def max_len(self) -> int:
    return self.pos.shape[1]

  def next_positions(self) -> jax.Array:
    """[B] position id following the last real entry of each row (0 for an empty row)."""
    return jnp.max(self.pos, axis=1) + 1


def write_rows(buf: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
  """Writes new [B, T, ...] into buf [B, S, ...] at row-dependent offsets start [B].

  The caller guarantees start + T <= S (XLA clamps out-of-range starts instead of failing,
  which would overwrite the newest entries).
  """
  return jax.vmap(lambda b, n, s: jax.lax.dynamic_update_slice_in_dim(b, n, s, axis=0))(
      buf, new.astype(buf.dtype), start)
