"""Device-side pytrees of the slot engine, bucket choice and their sharding.

`DecodeState` is everything the decode loop reads and writes, one row per slot: the KV
cache, the last sampled token (fed at the next step), how many tokens the current
turn has sampled, and the turn's sampling parameters. `Prefix` is a prefilled batch of
prompts waiting to be inserted into slots (JetStream's prefill result).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from spade_jax.engine.api import SamplingParams
from spade_jax.model import KVCache, constrain, logical_to_spec
from spade_jax.model.kv_cache import map_with_axes
from spade_jax.model.sharding import INFERENCE_RULES


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SlotParams:
  """Sampling parameters per row. All [B] except stop_ids [B, M] (-1 = unused)."""

  temperature: jax.Array  # float32
  top_p: jax.Array  # float32
  top_k: jax.Array  # int32, 0 = off
  seed: jax.Array  # uint32
  limit: jax.Array  # int32, most tokens this turn may sample (max_new_tokens or cache room)
  stop_ids: jax.Array  # int32 [B, M]

  @classmethod
  def from_requests(cls, params: Sequence[SamplingParams], limits: Sequence[int],
                    max_stop_ids: int, rows: int) -> SlotParams:
    """Host arrays for `rows` rows; rows past len(params) are inert padding (limit 1)."""
    stop = np.full((rows, max_stop_ids), -1, np.int32)
    for i, p in enumerate(params):
      if len(p.stop_token_ids) > max_stop_ids:
        raise ValueError(f"{len(p.stop_token_ids)} stop_token_ids exceed the engine's "
                         f"max_stop_ids={max_stop_ids}")
      stop[i, :len(p.stop_token_ids)] = p.stop_token_ids

    def col(values, fill, dtype):
      return np.array(list(values) + [fill] * (rows - len(params)), dtype)

    return cls(temperature=col((p.temperature for p in params), 0.0, np.float32),
               top_p=col((p.top_p for p in params), 1.0, np.float32),
               top_k=col((p.top_k for p in params), 0, np.int32),
               seed=col((p.seed % 2**32 for p in params), 0, np.uint32),
               limit=col(limits, 1, np.int32), stop_ids=stop)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeState:
  """All slots' decode state. cache [S, L]; token, count [S]; slot_params [S]."""

  cache: KVCache
  token: jax.Array  # int32, last sampled token of each slot (not yet in the cache)
  count: jax.Array  # int32, tokens sampled in the slot's current turn
  slot_params: SlotParams


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Prefix:
  """Prefilled prompts: their own cache [k, T], first sampled token and its logprob [k]."""

  cache: KVCache
  token: jax.Array
  logprob: jax.Array
  slot_params: SlotParams


def pick_bucket(n: int, buckets: Sequence[int]) -> int:
  """Smallest bucket >= n (buckets sorted ascending)."""
  for b in buckets:
    if b >= n:
      return b
  raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")


def row_buckets(max_rows: int, multiple_of: int = 1) -> tuple[int, ...]:
  """Powers of four below max_rows, then max_rows, each rounded up to a multiple of
  `multiple_of`: batch sizes of prefill calls (at most 4x padding, few compiles). With the
  mesh's batch shards as `multiple_of`, a call's rows split evenly over the chips instead of
  every chip computing all of them (the padding rows write nowhere)."""
  sizes = []
  b = 1
  while b < max_rows:
    sizes.append(b)
    b *= 4
  return tuple(sorted({-(-n // multiple_of) * multiple_of for n in (*sizes, max_rows)}))


def _map_layout(state: DecodeState, fn) -> DecodeState:
  """Applies fn(x, logical axes) to every leaf: the KV cache as kv_cache.map_with_axes names
  it, every other leaf's rows ("batch") first."""
  rows = lambda x: fn(x, ("batch",) + (None,) * (x.ndim - 1))
  return DecodeState(cache=map_with_axes(state.cache, fn), token=rows(state.token),
                     count=rows(state.count),
                     slot_params=jax.tree.map(rows, state.slot_params))


def constrain_state(state: DecodeState) -> DecodeState:
  """Pins the decode state's layout inside jit under the active mesh (no-op without one), by
  the engine's rules (INFERENCE_RULES: kv heads split as the weights' heads, slots over what
  they leave; the other rows over data)."""
  return _map_layout(state, lambda x, axes: constrain(x, axes, INFERENCE_RULES))


def state_shardings(state: DecodeState, mesh) -> DecodeState:
  """NamedShardings of the decode state on `mesh` (same layout as constrain_state)."""
  return _map_layout(state, lambda x, axes: NamedSharding(
      mesh, logical_to_spec(axes, x.shape, mesh, INFERENCE_RULES)))


def init_decode_state(cfg, num_slots: int, cache_len: int, max_stop_ids: int,
                      dtype: jnp.dtype) -> DecodeState:
  """Empty slots (host-built, then placed by the caller)."""
  params = SlotParams.from_requests([], [], max_stop_ids, num_slots)
  return DecodeState(cache=KVCache.init(cfg, num_slots, cache_len, dtype),
                     token=jnp.zeros((num_slots,), jnp.int32),
                     count=jnp.zeros((num_slots,), jnp.int32),
                     slot_params=jax.tree.map(jnp.asarray, params))
