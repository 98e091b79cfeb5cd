"""The engine's own copy of the weights (engine/weights.py): its dtype, its layout, and the
tokens sampled from it on a mesh against those sampled without one."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from spade_jax.engine import SlotConversationEngine
from spade_jax.engine.generate import generate
from spade_jax.model import get_preset, lora, make_mesh, shard_model
from spade_jax.model.testing import random_model

PROMPTS = [[3, 14, 15, 92, 65], [35, 89, 79], [32, 38, 46, 26, 43, 38, 32], [7]]
ENGINE = dict(num_slots=8, max_cache_len=64, prefill_buckets=(16,), decode_steps_per_poll=4)


def _variables(state):
  return jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable))


@pytest.mark.parametrize(("preset", "mesh_shape", "replica_chips"), [
    ("tiny", {"fsdp": 8}, 0), ("tiny", {"data": 2, "fsdp": 2, "tensor": 2}, 0),
    ("tiny-moe", {"fsdp": 4, "expert": 2}, 0), ("tiny-moe", {"fsdp": 8}, 2)])
def test_greedy_from_the_resharded_copy_equals_greedy_without_a_mesh(preset, mesh_shape,
                                                                     replica_chips):
  """The trainer's FSDP-sharded model on 8 devices, sampled through the engine's
  tensor-parallel copy (one over the model axes, or one per group of `replica_chips`
  chips), gives the tokens of the same model on one device (fp32 compute)."""
  cfg = get_preset(preset, param_dtype="float32", compute_dtype="float32")
  single = generate(random_model(cfg, seed=1), PROMPTS, 12, temperature=0.0)
  mesh = make_mesh(mesh_shape)
  sharded = generate(shard_model(random_model(cfg, seed=1), mesh), PROMPTS, 12,
                     temperature=0.0, mesh=mesh, replica_chips=replica_chips)
  assert [r.tokens for r in sharded] == [r.tokens for r in single]


def test_replicas_each_hold_a_whole_copy_and_a_share_of_the_slots():
  """engine.replica_chips=2 on an 8-chip FSDP mesh: four replicas of 2 chips. A weight
  splits 2 ways, not 8; the KV cache's rows split over the 4 replicas (and its kv heads
  over a replica's 2 chips); the trainer's arrays are read, never moved."""
  cfg = get_preset("tiny", param_dtype="float32", compute_dtype="bfloat16")
  mesh = make_mesh({"fsdp": 8})
  model = shard_model(random_model(cfg), mesh)
  conv = SlotConversationEngine(model, mesh=mesh, replica_chips=2, **ENGINE)
  engine = conv.engine
  assert dict(engine.mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2, "expert": 1}
  assert list(engine.mesh.devices.flat) == list(mesh.devices.flat)
  q = engine.params["groups"][0]["attn"]["q_proj"]["kernel"].get_value()  # [L, D, N=4, Hd]
  assert q.sharding.mesh == engine.mesh and q.sharding.shard_shape(q.shape)[2] == 2
  keys = conv._state.cache.v[0]  # [L, slots, kv heads, entries, Hd]
  shard = keys.sharding.shard_shape(keys.shape)
  assert (shard[1], shard[2]) == (keys.shape[1] // 4, keys.shape[2] // 2)
  assert all(x.sharding.mesh == mesh for x in jax.tree.leaves(nnx.state(model)))


def test_replica_chips_that_do_not_divide_the_mesh_are_refused_in_one_line():
  cfg = get_preset("tiny")
  mesh = make_mesh({"fsdp": 8})
  with pytest.raises(ValueError, match=r"^engine.replica_chips=3 must divide the mesh's 8 "
                                       r"chips \(0: one copy over all of them\)$"):
    SlotConversationEngine(shard_model(random_model(cfg), mesh), mesh=mesh, replica_chips=3,
                           **ENGINE)


def test_the_copy_is_in_the_compute_dtype_with_the_model_width_whole():
  cfg = get_preset("tiny-moe", param_dtype="float32", compute_dtype="bfloat16")
  mesh = make_mesh({"fsdp": 4, "tensor": 2})
  model = shard_model(random_model(cfg), mesh)
  engine = SlotConversationEngine(model, mesh=mesh, **ENGINE).engine
  for var in _variables(engine.params):
    axes, value = var.get_metadata()["logical_axes"], var.get_value()
    router = "expert_logits" in axes
    assert value.dtype == (jnp.float32 if router else jnp.bfloat16), axes
    spec = value.sharding.spec
    if "embed" in axes:
      assert len(spec) <= axes.index("embed") or spec[axes.index("embed")] is None, axes
  dense = engine.params["groups"][0]  # mlp_only_layers=(0,): the dense layer
  q = dense["attn"]["q_proj"]["kernel"].get_value()  # [L, D, N=4, Hd]: heads over fsdp
  assert q.sharding.shard_shape(q.shape) == (1, 64, 1, 16)
  gate = dense["mlp"]["gate_proj"]["kernel"].get_value()  # [L, D, F=128] over fsdp x tensor
  assert gate.sharding.shard_shape(gate.shape) == (1, 64, 16)
  # The trainer's arrays stay as they were: read, never donated.
  assert all(not x.is_deleted() and x.dtype == jnp.float32
             for x in jax.tree.leaves(nnx.state(model)))


def test_lora_copies_the_base_once_and_the_adapters_at_every_load():
  cfg = get_preset("tiny", lora_rank=4, param_dtype="float32", compute_dtype="bfloat16")
  mesh = make_mesh({"fsdp": 8})
  model = shard_model(random_model(cfg), mesh)
  engine = SlotConversationEngine(model, mesh=mesh, **ENGINE)
  first = engine.engine.params
  params = nnx.state(model, nnx.Param)
  engine.load_weights(params)
  second = engine.engine.params
  base = lambda state: jax.tree.leaves(nnx.state(nnx.merge(engine.engine.graphdef, state),
                                                 lora.BASE))
  adapters = lambda state: jax.tree.leaves(nnx.state(nnx.merge(engine.engine.graphdef, state),
                                                     lora.LoRAParam))
  assert all(a is b for a, b in zip(base(first), base(second), strict=True))
  assert all(a is not b for a, b in zip(adapters(first), adapters(second), strict=True))
  moved = jax.tree.map(lambda x: x + 1, params)  # a new base: copied again
  engine.load_weights(moved)
  assert all(a is not b for a, b in zip(base(second), base(engine.engine.params), strict=True))


def test_load_weights_refuses_another_shape_in_one_line():
  cfg = get_preset("tiny")
  engine = SlotConversationEngine(random_model(cfg), **ENGINE)
  other = nnx.state(random_model(dataclasses.replace(cfg, intermediate_size=96)))
  with pytest.raises(ValueError, match=r"^load_weights: .*mlp.*down_proj.*kernel.* is "
                                       r"float32\[2, 96, 64\], the engine's model has "
                                       r"float32\[2, 128, 64\]$"):
    engine.load_weights(other)
