"""The rollout engine's terms of the plan, per chip (formulas: docs/plan.md): its replicas,
its copy of the weights, its KV cache and what its programs hold beside them, as XLA's TPU
compiler lays them out (sharding.INFERENCE_RULES on the engine's mesh)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from spade_jax import config_schema
from spade_jax.engine.capacity import largest_append
from spade_jax.engine.config import EngineConfig
from spade_jax.model.attention import KEY_BLOCK, QUERY_BLOCK
from spade_jax.model.config import ModelConfig
from spade_jax.model.sharding import replica_count


def dtype_bytes(dtype: str) -> int:
  return np.dtype(jax.numpy.dtype(dtype)).itemsize


@dataclasses.dataclass(frozen=True)
class EngineMemory:
  replicas: int  # copies of the weights over the slice
  weights: int  # the copy's bytes a chip
  kv_cache: int
  decode_transient: int  # what a decode block holds beside its arguments
  append_transient: int  # what the step's largest append holds beside its arguments


def engine_memory(cfg: ModelConfig, engine: EngineConfig, chips: int, data: int,
                  parameters: int, prompts: int) -> EngineMemory:
  """The engine of `cfg` with `parameters` parameters on `chips` chips, the trainer's mesh
  having `data` rows; `prompts` designer prompts a refresh."""
  replicas = engine_replicas(engine, chips, data)
  model = chips // replicas
  kv_shards = kv_cache_shards(engine.num_slots, cfg.num_kv_heads, replicas, model)
  # Every slot holds the longest row plus room for one more prefill piece (engine/slot_engine).
  entries = engine.max_cache_len + engine.prefill_buckets[-1]
  kv = (engine.num_slots * entries * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim
        * dtype_bytes(cfg.compute_dtype)) // kv_shards
  # The copy: the compute dtype where narrower, split over a replica's chips.
  copy = min(dtype_bytes(cfg.param_dtype), dtype_bytes(cfg.compute_dtype))
  decode, append = rollout_transients(cfg, engine, prompts, replicas, model, kv)
  return EngineMemory(replicas, parameters * copy // model, kv, decode, append)


def engine_replicas(engine: EngineConfig, chips: int, data: int) -> int:
  """Copies of the engine's weights on `chips` chips (model.sharding.engine_mesh): one per
  group of `engine.replica_chips` chips, else one per row of the trainer's `data` axis."""
  if not engine.replica_chips:
    return data
  try:
    return replica_count(chips, engine.replica_chips)
  except ValueError as err:
    raise config_schema.ConfigError(str(err)) from None


def _split(n: int, ways: int) -> int:
  """A dimension of size n per chip under the inference rules: split where it divides."""
  return n // ways if n % ways == 0 else n


def rollout_transients(cfg: ModelConfig, engine: EngineConfig, prompts: int, replicas: int,
                       model: int, kv: int) -> tuple[int, int]:
  """(decode, append): bytes per chip the engine's programs hold beside their arguments, as
  XLA's TPU compiler lays them out (heads, MLP and vocabulary split over a replica's `model`
  chips, rows over the replicas: sharding.INFERENCE_RULES).

  A decode block takes one layer's keys (or values) out of the stacked cache, writes them and
  puts them back (model/attention.py): 1 / (2 layers) of the cache `kv`; and samples from f32
  logits of every slot. The largest append (`largest_append`: the designer prompts' first
  pieces) holds, in its widest layer, the keys and values it reads (padded to the key block),
  one block of f32 scores per query block, the tokens' D-wide activations (three in the
  compute dtype, two f32 partial sums of the row-parallel projections) and three MLP-wide
  arrays.
  """
  c = dtype_bytes(cfg.compute_dtype)
  slots = _split(engine.num_slots, replicas)
  decode = kv // (2 * cfg.num_layers) + 2 * slots * _split(cfg.vocab_size, model) * 4
  rows, t, length = largest_append(engine, prompts, replicas)
  tokens = _split(rows, replicas) * t
  kv_heads, q_heads = _split(cfg.num_kv_heads, model), _split(cfg.num_heads, model)
  keys = -(-length // KEY_BLOCK) * KEY_BLOCK
  width = (cfg.num_experts_per_tok * cfg.moe_intermediate_size if cfg.is_moe
           else cfg.intermediate_size)
  append = (2 * _split(rows, replicas) * kv_heads * keys * cfg.head_dim * c
            + _split(rows, replicas) * q_heads * min(t, QUERY_BLOCK) * KEY_BLOCK * 4
            + tokens * cfg.hidden_size * (3 * c + 2 * 4)
            + 3 * tokens * _split(width, model) * c)
  return decode, append


def kv_cache_shards(slots: int, kv_heads: int, replicas: int, model: int) -> int:
  """Ways the engine's KV cache splits (sharding.INFERENCE_RULES): its kv heads over the
  `model` chips of a replica where they divide them, its slots over the replicas and, when
  the heads do not split, over the model chips too (each where it divides the slots)."""
  heads = model if kv_heads % model == 0 else 1
  rows = replicas * model // heads
  return heads * (rows if slots % rows == 0 else replicas if slots % replicas == 0 else 1)
