"""MoE routing per batch shard: equal to the unsharded block, and on the TPU compiler no
collective carries the whole micro-batch's tokens or dispatched rows; with an expert axis the
rows travel by ragged all-to-all."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from spade_jax import tpu_aot
from spade_jax.model import get_preset, logical_to_spec, make_mesh, state_shardings
from spade_jax.model.moe import MoEBlock


def random_block(cfg, seed=0, dtype=jnp.float32):
  """(graphdef, params) of an MoE block whose router logits and outputs are O(1), so that
  routing differs across tokens without near-ties and the float32 comparisons are well
  conditioned (logits of std 8 let the CPU's row-count-dependent rounding of the router's
  matmul, about 4e-6, grow past the test's 1e-5 on an AMD EPYC); weights and the router's
  compute in `dtype`."""
  block = nnx.eval_shape(lambda: MoEBlock(cfg, rngs=nnx.Rngs(0)))
  block.router.compute_dtype = jnp.dtype(dtype)
  rng = np.random.RandomState(seed)
  for proj, std in ((block.router, cfg.hidden_size ** -0.5), (block.gate_proj, 0.3),
                    (block.up_proj, 0.3), (block.down_proj, 0.3)):
    proj.kernel.set_value(jnp.asarray(rng.normal(0, std, proj.kernel.shape), dtype))
  return nnx.split(block)


def loss_fn(graphdef):
  def loss(params, x):
    out = nnx.merge(graphdef, params)(x)
    return jnp.sum(out * jnp.cos(out)), out
  return loss


@pytest.mark.parametrize("mesh_cfg, batch, length, per_shard", [
    ({"fsdp": 8}, 8, 32, True),
    ({"data": 2, "fsdp": 4}, 8, 32, True),
    ({"data": 2, "fsdp": 4}, 2, 64, True),  # rows split over data alone: fsdp gathers outside
    ({"fsdp": 2, "tensor": 2, "expert": 2}, 8, 32, True),  # experts and their width split too
    ({"data": 2, "expert": 4}, 8, 32, True),
    ({"fsdp": 8}, 8, 1, False),  # decode: the rows move, not the experts
    ({"data": 2, "expert": 4}, 8, 1, True),  # nothing to gather: per shard at any size
])
def test_sharded_block_equals_unsharded_values_and_grads(mesh_cfg, batch, length, per_shard):
  cfg = get_preset("tiny-moe", num_experts=8, num_experts_per_tok=3)
  graphdef, params = random_block(cfg)
  x = np.random.RandomState(1).normal(0, 1.0, (batch, length, cfg.hidden_size))
  (got, grads), (want, want_grads), jaxpr = sharded_and_unsharded(
      graphdef, params, jnp.asarray(x, jnp.float32), mesh_cfg)
  assert ("shard_map" in jaxpr) == per_shard and "ragged_dot" in jaxpr
  assert float(jnp.std(want)) > 0.1  # the check is not vacuous
  np.testing.assert_allclose(got, want, atol=1e-5)
  for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
    np.testing.assert_allclose(g, w, atol=1e-4 * float(jnp.max(jnp.abs(w))))


def sharded_and_unsharded(graphdef, params, x, mesh_cfg):
  """((out, grads), (out, grads), jaxpr): the block's output and gradients (parameters and x)
  on the mesh `mesh_cfg`, the same on one device, and the sharded step's jaxpr."""
  step = jax.value_and_grad(loss_fn(graphdef), argnums=(0, 1), has_aux=True)
  (_, want), want_grads = jax.jit(step)(params, x)
  mesh = make_mesh(mesh_cfg)
  with jax.set_mesh(mesh):
    params = jax.device_put(params, state_shardings(params, mesh))
    x = jax.device_put(x, NamedSharding(mesh, logical_to_spec(("batch", None, None), x.shape,
                                                               mesh)))
    (_, got), grads = jax.jit(step)(params, x)
    jaxpr = str(jax.make_jaxpr(step)(params, x))
  return (got, grads), (want, want_grads), jaxpr


@pytest.mark.parametrize("mesh_cfg, batch, length", [
    ({"fsdp": 2, "tensor": 2, "expert": 2}, 8, 32),
    ({"data": 2, "expert": 4}, 8, 32),
    ({"data": 2, "expert": 4}, 8, 1),  # decode: one token a chip
    ({"expert": 8}, 3, 5),  # 15 tokens over 8 chips: padded to 16
    ({"data": 2, "expert": 4}, 2, 3),  # 3 tokens a batch shard over 4 chips: padded to 4
])
def test_expert_parallel_block_is_exact_in_float64(mesh_cfg, batch, length):
  """With an expert axis every chip routes 1/E_axis of its batch shard's tokens and exchanges
  the rows (on XLA:CPU by padded all_to_all). In float64, router included, the result equals
  the unsharded block to rounding: the fp32 test above also sees the router's fp32 logits
  round differently for another number of rows (XLA:CPU picks its dot kernel by shape)."""
  cfg = get_preset("tiny-moe", num_experts=8, num_experts_per_tok=3, param_dtype="float64",
                   compute_dtype="float64")
  with jax.enable_x64(True):
    graphdef, params = random_block(cfg, dtype=jnp.float64)
    x = jnp.asarray(np.random.RandomState(1).normal(0, 1.0, (batch, length, cfg.hidden_size)))
    (got, grads), (want, want_grads), jaxpr = sharded_and_unsharded(graphdef, params, x,
                                                                   mesh_cfg)
    assert "all_to_all" in jaxpr and got.dtype == jnp.float64
    assert float(jnp.std(want)) > 0.1
    np.testing.assert_allclose(got, want, atol=1e-10)
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
      np.testing.assert_allclose(g, w, atol=1e-10 * float(jnp.max(jnp.abs(w))))


# Tokens N = 32 * 64 = 2048, assignments N * k = 4096: neither is a dimension of a weight
# ([8, 256, 96], [256, 8]) nor of one batch shard's tokens or rows (at most 512 and 1024).
B, T, D, E, K, F = 32, 64, 256, 8, 2, 96
needs_libtpu = pytest.mark.skipif(not tpu_aot.libtpu_available(),
                                  reason="the TPU compiler (libtpu) is not installed")


def compile_on_tpu(mesh_cfg, fn, batch, length, monkeypatch, top_k=K):
  """HLO of fn(params, x) for an MoE block (bf16 compute) and x [batch, length, D], compiled
  for a v5e-8 slice with the mesh `mesh_cfg`, parameters and rows sharded."""
  monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # pytest-xdist workers load it too
  cfg = get_preset("tiny-moe", hidden_size=D, num_experts=E, num_experts_per_tok=top_k,
                   moe_intermediate_size=F, compute_dtype="bfloat16")
  mesh = make_mesh(mesh_cfg, tpu_aot.slice_devices("v5e-8"))
  graphdef, abstract = nnx.split(nnx.eval_shape(lambda: MoEBlock(cfg, rngs=nnx.Rngs(0))))
  params = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, state_shardings(abstract, mesh))
  x = jax.ShapeDtypeStruct((batch, length, D), jnp.bfloat16,
                           sharding=NamedSharding(mesh, P(("data", "fsdp"))))
  with jax.set_mesh(mesh):
    return tpu_aot.compile_program(fn(graphdef), (params, x)).hlo


@needs_libtpu
@pytest.mark.parametrize("mesh_cfg", [
    {"fsdp": 8},
    {"data": 2, "fsdp": 2, "expert": 2},
    {"fsdp": 4, "tensor": 2},
])
def test_tpu_collectives_carry_one_shards_rows(mesh_cfg, monkeypatch):
  grad = lambda graphdef: jax.value_and_grad(lambda p, x: loss_fn(graphdef)(p, x)[0])
  found = tpu_aot.collectives(compile_on_tpu(mesh_cfg, grad, B, T, monkeypatch))
  assert any(c.op == "all-gather" for c in found)  # the experts' FSDP gathers, at least
  global_rows = {B * T, B * T * K}
  carrying = [c for c in found if any(global_rows & set(s) for s in c.shapes)]
  assert not carrying, f"collectives with the whole micro-batch's rows: {carrying}"


@needs_libtpu
@pytest.mark.parametrize("mesh_cfg", [{"data": 2, "fsdp": 2, "expert": 2},
                                      {"fsdp": 2, "expert": 4}])
def test_tpu_expert_axis_moves_rows_by_ragged_all_to_all(mesh_cfg, monkeypatch):
  """Each chip routes 1/E_axis of its batch shard's tokens and sends every row to its expert's
  chip and back, forward and backward, by ragged all-to-all; the combined output is gathered
  over the expert axis, never all-reduced. k = 3: with 2, one batch shard's worst-case rows on
  2 shards, [N_shard * k, D], would equal the micro-batch's B * T."""
  top_k = 3
  grad = lambda graphdef: jax.value_and_grad(lambda p, x: loss_fn(graphdef)(p, x)[0],
                                             argnums=(0, 1))
  found = tpu_aot.collectives(compile_on_tpu(mesh_cfg, grad, B, T, monkeypatch, top_k))
  assert sum(c.op == "ragged-all-to-all" for c in found) == 4, found
  global_rows = {B * T, B * T * top_k}
  carrying = [c for c in found if any(global_rows & set(s) for s in c.shapes)]
  assert not carrying, f"collectives with the whole micro-batch's rows: {carrying}"
  shard = B * T // math.prod(mesh_cfg.get(a, 1) for a in ("data", "fsdp"))  # N_shard
  local = shard // mesh_cfg["expert"]  # one chip's tokens
  rows = {shard, local, local * top_k}  # tokens or rows of [rows, D]
  summed = [c for c in found if c.op == "all-reduce"
            and any(s[-1:] == (D,) and math.prod(s[:-1]) in rows for s in c.shapes)]
  assert not summed, f"all-reduced tokens or rows: {summed}"


@needs_libtpu
def test_tpu_decode_leaves_the_experts_in_place(monkeypatch):
  forward = lambda graphdef: lambda p, x: nnx.merge(graphdef, p)(x)
  found = tpu_aot.collectives(compile_on_tpu({"fsdp": 8}, forward, 16, 1, monkeypatch))
  kernel_bytes = E * D * F * 2  # one expert projection in bf16
  assert found and max(c.bytes for c in found) < kernel_bytes / 8, found
