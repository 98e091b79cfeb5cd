"""Position-addressed KV cache: one pytree for prefill, decode and multi-turn append.

Each row of the cache is an append-only list of entries. An entry stores its key, value and
the position id of the token it came from; -1 marks an empty slot or a padding token. A
query at position p attends every entry of its own row with 0 <= pos <= p, so a left-padded
prompt, a one-token decode step and a new conversation turn are all the same call.

The layers of a group (`ModelConfig.layer_groups`) share one stacked buffer with a leading
layer axis, which the model's layer scan carries; a layer takes its own slice of it, writes
and reads that, and puts it back (Attention).

A call may use only some rows of the cache (`Rows`, e.g. the slots a multi-turn append
writes) and attend only the first `read_len` entries of each. New entries are scattered into
the whole cache buffers, so a donated cache is updated in place; only the rows read are
gathered.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from spade_jax.model.config import ModelConfig
from spade_jax.model.platform import current_platform


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """k: tuple over layer groups of [L_g, B, K, Hd, S] on CPU, [L_g, B, K, S, Hd] on GPU /
  TPU; v: same of [L_g, B, K, S, Hd]; pos: [B, S] int32; end: [B] int32.

  Each kv head's block is contiguous. On CPU the keys are stored transposed: a decode step's
  scores are then a [G, Hd] x [Hd, S] product per row and head, and its output a [G, S] x
  [S, Hd] one, two plain matmuls over contiguous memory; on XLA's CPU backend this is faster
  than any form over [B, K, S, Hd] keys, by far at long caches. On an accelerator the keys
  take the values' layout, the one JAX's decode kernels read (`key_entry_axis`).
  """

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
    k_shape = ((batch_size, cfg.num_kv_heads, cfg.head_dim, max_len) if key_entry_axis() == 3
               else (batch_size, cfg.num_kv_heads, max_len, cfg.head_dim))
    v_shape = (batch_size, cfg.num_kv_heads, max_len, cfg.head_dim)
    groups = [n for _, n in cfg.layer_groups()]
    return cls(k=tuple(jnp.zeros((n, *k_shape), dtype) for n in groups),
               v=tuple(jnp.zeros((n, *v_shape), dtype) for n in groups),
               pos=jnp.full((batch_size, max_len), -1, jnp.int32),
               end=jnp.zeros((batch_size,), jnp.int32))

  @property
  def batch_size(self) -> int:
    return self.pos.shape[0]

  @property
  def max_len(self) -> int:
    return self.pos.shape[1]

  @property
  def num_layers(self) -> int:
    return sum(k.shape[0] for k in self.k)


Rows = jax.Array | None  # cache rows a call uses: None = all, else an index per input row
V_ENTRY_AXIS = 2  # entries axis of one layer's value buffer [B, K, S, Hd]
_V_AXES = ("slots", "kv_heads", "length", "head_dim")


def stacked(axis: int) -> int:
  """Where axis `axis` of one layer's buffer (e.g. `key_entry_axis()`) sits in its group's
  stacked buffer [L_g, ...]: one further, behind the layer axis."""
  return axis + 1


def key_entry_axis(platform: str | None = None) -> int:
  """Entries axis of the key buffers on `platform` (default: `platform.current_platform()`): 3 on
  CPU ([B, K, Hd, S]), 2 elsewhere ([B, K, S, Hd], like the values)."""
  return 3 if (current_platform() if platform is None else platform) == "cpu" else 2


def _key_axes() -> tuple[str, ...]:
  if key_entry_axis() == 3:
    return ("slots", "kv_heads", "head_dim", "length")
  return _V_AXES


def map_with_axes(cache: KVCache, fn) -> KVCache:
  """A KVCache of fn(leaf, logical axis names of the leaf): the one place that names the
  cache's axes, for sharding rules. The key and value rows are "slots" (they split over the
  axes their kv heads leave); positions and ends are small and follow the "batch" rows."""
  return KVCache(k=tuple(fn(x, ("layers", *_key_axes())) for x in cache.k),
                 v=tuple(fn(x, ("layers", *_V_AXES)) for x in cache.v),
                 pos=fn(cache.pos, ("batch", "length")), end=fn(cache.end, ("batch",)))


def row_ids(rows: Rows, count: int) -> jax.Array:
  """Cache row of each of the `count` input rows: None means rows 0..count-1 (the whole
  cache); an int array [count] names the rows."""
  if rows is None:
    return jnp.arange(count, dtype=jnp.int32)
  return rows.astype(jnp.int32)


def read_window(buf: jax.Array, rows: Rows, length: int | None = None,
                entry_axis: int = 1) -> jax.Array:
  """The selected rows of buf [S, ...] and the first `length` entries (None = all) along
  `entry_axis` (1 for pos [S, L], key_entry_axis() / V_ENTRY_AXIS for keys / values).

  Index arrays gather; out-of-range rows read the last row (their results are never
  written).
  """
  part = buf if length is None else jax.lax.slice_in_dim(buf, 0, length, axis=entry_axis)
  return part if rows is None else jnp.take(part, rows, axis=0, mode="clip")


def write_entries(buf: jax.Array, new: jax.Array, rows: Rows, start: jax.Array,
                  entry_axis: int = 1) -> jax.Array:
  """Writes new [k, ...] (laid out like buf, T entries along `entry_axis`) into buf [S, ...]
  at entries start[i]..start[i]+T-1 of row row_ids(rows)[i], in place when buf is donated.
  A row index out of range (engine padding) drops its write; the caller guarantees
  start + T <= L for the others.
  """
  ids = row_ids(rows, new.shape[0])
  index = jnp.stack([ids, start.astype(jnp.int32)], axis=1)  # [k, 2]
  dims = jax.lax.ScatterDimensionNumbers(update_window_dims=tuple(range(1, new.ndim)),
                                         inserted_window_dims=(0,),
                                         scatter_dims_to_operand_dims=(0, entry_axis))
  return jax.lax.scatter(buf, index, new.astype(buf.dtype), dims,
                         indices_are_sorted=rows is None,
                         unique_indices=True, mode=jax.lax.GatherScatterMode.FILL_OR_DROP)
