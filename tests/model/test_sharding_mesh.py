"""Mesh construction, the logical-axis table, and sharded forward == unsharded forward."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from spade_jax.model import (
  KVCache,
  create_sharded,
  get_preset,
  kv_cache_shardings,
  logical_to_spec,
  make_mesh,
  shard_model,
  state_shardings,
)
from spade_jax.model.qwen3 import MLP
from spade_jax.model.sharding import INFERENCE_RULES, use_rules
from spade_jax.model.testing import random_model


def test_make_mesh_fills_minus_one_with_auto_axes():
  mesh = make_mesh({"data": 2, "fsdp": -1})
  assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "tensor": 1, "expert": 1}
  assert set(mesh.axis_types) == {AxisType.Auto}


@pytest.mark.parametrize("cfg, match", [
    ({"data": 3, "fsdp": -1}, "not a multiple"),
    ({"data": 2, "fsdp": 2}, "needs 4 devices, 8 available"),
    ({"data": -1, "fsdp": -1}, "at most one -1"),
    ({"model": 2}, "unknown axes"),
])
def test_make_mesh_rejects_bad_configs(cfg, match):
  with pytest.raises(ValueError, match=match):
    make_mesh(cfg)


def test_logical_to_spec_drops_axes_that_do_not_divide():
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  assert logical_to_spec(("batch", None, "embed"), (8, 3, 64), mesh) == P(("data", "fsdp"), None,
                                                                           None)
  # batch 2: data divides it, fsdp no longer does; kv_heads 3 is not split over tensor.
  assert logical_to_spec(("batch", "kv_heads"), (2, 3), mesh) == P("data", None)
  assert logical_to_spec(("expert", "embed", "mlp"), (4, 64, 32), mesh) == P(None, "fsdp",
                                                                             "tensor")
  with pytest.raises(KeyError, match="no rule"):
    logical_to_spec(("sequence",), (4,), mesh)


def test_inference_rules_keep_the_model_width_whole_and_split_kv_heads_before_slots():
  mesh = make_mesh({"fsdp": 4, "tensor": 2})
  assert logical_to_spec(("embed", "mlp"), (64, 32), mesh, INFERENCE_RULES) == P(
      None, ("fsdp", "tensor"))
  cache = ("layers", "slots", "kv_heads", "length", "head_dim")
  # 8 kv heads take both model axes, so the slots (no data axis) stay whole ...
  assert logical_to_spec(cache, (1, 16, 8, 64, 16), mesh, INFERENCE_RULES) == P(
      None, None, ("fsdp", "tensor"), None, None)
  # ... 2 take tensor only, and the slots what is left.
  assert logical_to_spec(cache, (1, 16, 2, 64, 16), mesh, INFERENCE_RULES) == P(
      None, "fsdp", "tensor", None, None)
  with use_rules(INFERENCE_RULES):  # the active table for everything traced inside
    assert logical_to_spec(("batch", "vocab"), (16, 128), mesh) == P(None, ("fsdp", "tensor"))
  assert logical_to_spec(("batch", "vocab"), (16, 128), mesh) == P("fsdp", "tensor")


@pytest.fixture(scope="module")
def reference():
  cfg = get_preset("tiny-moe")  # layer 0 dense MLP, layer 1 MoE, untied head
  graphdef, state = nnx.split(random_model(cfg))
  ids = np.random.RandomState(0).randint(0, cfg.vocab_size, (8, 8)).astype(np.int32)
  logits = jax.jit(lambda s, i: nnx.merge(graphdef, s)(i))(state, ids)
  return cfg, graphdef, state, ids, np.asarray(logits)


@pytest.mark.parametrize("mesh_cfg, q_spec, up_spec", [
    ({"fsdp": 2, "tensor": 2, "expert": 2}, P("fsdp", "tensor", None),
     P("expert", "fsdp", "tensor")),
    ({"data": 2, "fsdp": 4}, P("fsdp", None, None), P(None, "fsdp", None)),
])
def test_sharded_forward_equals_unsharded(reference, mesh_cfg, q_spec, up_spec):
  cfg, graphdef, state, ids, want = reference
  mesh = make_mesh(mesh_cfg)
  with jax.set_mesh(mesh):
    model = shard_model(nnx.merge(graphdef, state), mesh)
    # Stacked [L_g, ...]: the layer axis replicated. Group 0 is layer 0, group 1 layer 1.
    assert model.groups[0].attn.q_proj.kernel[...].sharding.spec == P(None, *q_spec)
    assert model.groups[1].mlp.up_proj.kernel[...].sharding.spec == P(None, *up_spec)
    cache = KVCache.init(cfg, 8, 8)
    cache = jax.device_put(cache, kv_cache_shardings(cache, mesh))

    @jax.jit
    def run(state, ids, cache):
      model = nnx.merge(graphdef, state)
      return model(ids), model(ids, cache=cache)[0]

    logits, cached = run(nnx.state(model), ids, cache)
  np.testing.assert_allclose(logits, want, atol=1e-5)
  np.testing.assert_allclose(cached, want, atol=1e-5)


def test_create_sharded_places_parameters_per_logical_axes():
  cfg = get_preset("tiny")
  factory = lambda: MLP(cfg, rngs=nnx.Rngs(0))  # any module; an MLP compiles fast
  mesh = make_mesh({"fsdp": 4, "tensor": 2})
  with jax.set_mesh(mesh):
    mlp = create_sharded(factory, mesh)  # parameters are born sharded
  assert mlp.up_proj.kernel[...].sharding.spec == P("fsdp", "tensor")
  assert mlp.down_proj.kernel[...].sharding.spec == P("tensor", "fsdp")
  state = nnx.state(mlp)
  params = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable))
  for var, want in zip(params, jax.tree.leaves(state_shardings(state, mesh)), strict=True):
    assert var[...].sharding == want
  up = np.asarray(mlp.up_proj.kernel[...])
  assert up.shape == (cfg.hidden_size, cfg.intermediate_size) and 0.018 < up.std() < 0.022


def test_kv_cache_shardings_put_rows_on_batch_axes_and_kv_heads_on_tensor():
  cfg = get_preset("tiny")  # 2 kv heads
  cache = KVCache.init(cfg, 4, 8)
  shardings = kv_cache_shardings(cache, make_mesh({"fsdp": 4, "tensor": 2}))
  assert shardings.k[0].spec == P(None, "fsdp", "tensor", None, None)  # [L, B, K, Hd, S]
  assert shardings.v[0].spec == P(None, "fsdp", "tensor", None, None)  # [L, B, K, S, Hd]
  assert shardings.pos.spec == P("fsdp", None) and shardings.end.spec == P("fsdp")
