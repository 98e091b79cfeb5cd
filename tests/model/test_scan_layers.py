"""Decoder layers stacked per group and run by one scan; the per-layer views and names.

A Qwen3-MoE of four layers with layer 1 dense is three groups (MoE x1, dense x1, MoE x2),
so every test sees a group of one layer and a group of several.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import KVCache, get_preset
from spade_jax.model.attention_impl import resolve_attention_impl, self_mask
from spade_jax.model.hf_io import tensor_maps
from spade_jax.model.kv_cache import key_entry_axis
from spade_jax.model.layers import rope_cos_sin
from spade_jax.model.qwen3 import Qwen3, default_positions
from spade_jax.model.testing import random_model

MIXED = get_preset("tiny-moe", num_layers=4, mlp_only_layers=(1,))


def _params(model):
  return nnx.to_flat_state(nnx.state(model, nnx.Param))


def test_mixed_layers_form_groups_in_order():
  assert MIXED.layer_groups() == ((True, 1), (False, 1), (True, 2))
  assert [MIXED.layer_position(i) for i in range(4)] == [(0, 0), (1, 0), (2, 0), (2, 1)]
  with pytest.raises(IndexError):
    MIXED.layer_position(4)
  assert get_preset("qwen3-4b").layer_groups() == ((False, 36),)
  assert get_preset("qwen3-30b-a3b").layer_groups() == ((True, 48),)


@pytest.mark.parametrize("depth", [1, 3, 5])
def test_a_model_of_depth_l_stacks_l_layers_and_scans_them_once(depth):
  cfg = get_preset("tiny", num_layers=depth)
  model = nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)))
  layer_params = [(p, v) for p, v in _params(model) if p[0] == "groups"]
  assert {p[1] for p, _ in layer_params} == {0}
  for _, var in layer_params:  # [L, ...], the layer axis named and replicated
    assert var.shape[0] == depth and var.get_metadata()["logical_axes"][0] == "layers"
  model = random_model(cfg)
  ids = jnp.ones((1, 4), jnp.int32)
  jaxpr = str(jax.make_jaxpr(lambda s: nnx.merge(nnx.graphdef(model), s)(ids))(nnx.state(model)))
  assert jaxpr.count(f"length={depth}") == 1 and jaxpr.count("scan[") == 1


def test_the_scan_equals_the_layers_run_one_by_one():
  model = random_model(MIXED, seed=3)
  ids = np.random.default_rng(0).integers(1, MIXED.vocab_size, (2, 7)).astype(np.int32)
  positions = default_positions(jnp.ones(ids.shape, bool), None)
  impl = resolve_attention_impl(MIXED.attention_impl, MIXED.compute_dtype)
  mask = self_mask(impl, positions, None)
  cos, sin = rope_cos_sin(positions, MIXED.head_dim, MIXED.rope_theta)
  x = model.embed(ids)
  for i in range(MIXED.num_layers):
    x = model.layer(i)(x, cos, sin, mask)[0]
  want = model.logits_from_hidden(model.final_norm(x))
  np.testing.assert_allclose(np.asarray(model(ids)), np.asarray(want), rtol=0, atol=1e-5)


def test_a_layer_view_is_its_slice_and_set_layer_writes_only_that_slice():
  model = random_model(MIXED, seed=1)
  before = {p: np.asarray(v[...]) for p, v in _params(model)}
  view = model.layer(3)  # group 2, slice 1
  q = view.attn.q_proj.kernel
  assert q.shape == (MIXED.hidden_size, MIXED.num_heads, MIXED.head_dim)
  assert q.get_metadata()["logical_axes"] == ("embed", "q_heads", "head_dim")
  np.testing.assert_array_equal(q[...], before[("groups", 2, "attn", "q_proj", "kernel")][1])
  q.value = q[...] + 1.0
  model.set_layer(3, view)
  for path, value in _params(model):
    want = before[path].copy()
    if path == ("groups", 2, "attn", "q_proj", "kernel"):
      want[1] += 1.0
    np.testing.assert_array_equal(value[...], want, err_msg=str(path))


def test_tensor_maps_name_each_layer_slice_once():
  model = random_model(MIXED)
  shapes = {p: v.shape for p, v in _params(model)}
  maps = tensor_maps(MIXED)
  assert len({m.hf for m in maps}) == len(maps)
  for i in range(MIXED.num_layers):
    g, j = MIXED.layer_position(i)
    mine = [m for m in maps if m.hf.startswith(f"model.layers.{i}.")]
    assert mine and all(m.param[:2] == ("groups", g) and m.layer == j for m in mine)
    assert all(j < shapes[m.param][0] for m in mine)
  assert {m.param for m in maps} == set(shapes)


def test_the_cache_stacks_each_group_and_every_layer_writes_its_own_slice():
  cache = KVCache.init(MIXED, 3, 8)
  assert [k.shape[0] for k in cache.k] == [1, 1, 2] and cache.num_layers == 4
  assert cache.v[2].shape == (2, 3, MIXED.num_kv_heads, 8, MIXED.head_dim)  # [L, B, K, S, Hd]
  assert key_entry_axis() == 3 and cache.k[2].shape == (2, 3, MIXED.num_kv_heads,
                                                        MIXED.head_dim, 8)  # [L, B, K, Hd, S]
  model = random_model(MIXED, seed=2)
  ids = jnp.array([[5, 6], [7, 8]], jnp.int32)
  _, cache = model.hidden(ids, cache=cache, rows=jnp.array([2, 0]))
  values = [layer for v in cache.v for layer in np.asarray(v)]  # 4 x [B, K, S, Hd]
  for i, v in enumerate(values):  # rows 2 and 0, entries 0 and 1; distinct per layer
    assert (np.abs(v[[0, 2], :, :2]).min(axis=(1, 3)) > 0).all(), i
    assert not v[1].any() and not v[:, :, 2:].any(), i
  assert all(not np.allclose(values[i], values[i + 1]) for i in range(3))
