"""Qwen3 / Qwen3-MoE in Flax NNX: config, model, KV cache, mesh sharding, Hugging Face I/O,
and `load_model` (a Hugging Face directory or a trainer checkpoint)."""

from spade_jax.model.config import PRESETS, ModelConfig, get_preset, register_preset
from spade_jax.model.hf_io import from_pretrained, save_pretrained
from spade_jax.model.kv_cache import KVCache
from spade_jax.model.load import load_model
from spade_jax.model.qwen3 import Qwen3
from spade_jax.model.sharding import (
    LOGICAL_RULES,
    MESH_AXES,
    batch_sharding,
    batch_shards,
    constrain,
    create_sharded,
    kv_cache_shardings,
    logical_to_spec,
    make_mesh,
    shard_model,
    state_shardings,
)

__all__ = [
    "LOGICAL_RULES", "MESH_AXES", "KVCache", "ModelConfig", "PRESETS", "Qwen3", "batch_sharding",
    "batch_shards", "constrain", "create_sharded", "from_pretrained", "get_preset",
    "kv_cache_shardings", "load_model", "logical_to_spec", "make_mesh", "register_preset",
    "save_pretrained", "shard_model", "state_shardings",
]
