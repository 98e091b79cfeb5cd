"""Sorted ragged_dot dispatch == a dense all-experts reference, in outputs and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import get_preset
from spade_jax.model.moe import MoEBlock, sort_by_expert


def dense_reference(x, router, gate, up, down, top_k, norm_topk_prob):
  """Every expert on every token, combined with the top-k routing weights (zeros elsewhere).

  Top-k is chosen by rank (number of strictly larger probabilities), not lax.top_k.
  """
  probs = jax.nn.softmax(x @ router, axis=-1)  # [N, E]
  rank = jnp.sum(probs[:, None, :] > probs[:, :, None], axis=-1)  # [N, E]
  weights = jnp.where(rank < top_k, probs, 0.0)
  if norm_topk_prob:
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
  hidden = jax.nn.silu(jnp.einsum("nd,edf->enf", x, gate)) * jnp.einsum("nd,edf->enf", x, up)
  return jnp.einsum("ne,enf,efd->nd", weights, hidden, down)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_dispatch_matches_dense_reference_values_and_grads(norm_topk_prob):
  cfg = get_preset("tiny-moe", num_experts=8, num_experts_per_tok=3,
                   norm_topk_prob=norm_topk_prob)
  block = nnx.eval_shape(lambda: MoEBlock(cfg, rngs=nnx.Rngs(0)))
  rng = np.random.RandomState(0)
  # Weights large enough that routing differs across tokens (no near-ties) and outputs are O(1).
  for proj, std in ((block.router, 1.0), (block.gate_proj, 0.3), (block.up_proj, 0.3),
                    (block.down_proj, 0.3)):
    proj.kernel.set_value(jnp.asarray(rng.normal(0, std, proj.kernel.shape), jnp.float32))
  x = jnp.asarray(rng.normal(0, 1.0, (3, 7, cfg.hidden_size)), jnp.float32)
  graphdef, params = nnx.split(block)

  def loss_sparse(params, x):
    out = nnx.merge(graphdef, params)(x)
    return jnp.sum(out * jnp.cos(out)), out

  def loss_dense(params, x):
    p = nnx.merge(graphdef, params)
    out = dense_reference(x.reshape(-1, cfg.hidden_size), p.router.kernel[...],
                          p.gate_proj.kernel[...], p.up_proj.kernel[...],
                          p.down_proj.kernel[...], cfg.num_experts_per_tok, norm_topk_prob)
    out = out.reshape(x.shape)
    return jnp.sum(out * jnp.cos(out)), out

  (_, got), grads = jax.jit(jax.value_and_grad(loss_sparse, has_aux=True))(params, x)
  (_, want), want_grads = jax.jit(jax.value_and_grad(loss_dense, has_aux=True))(params, x)
  assert float(jnp.std(want)) > 0.1  # the check is not vacuous
  np.testing.assert_allclose(got, want, atol=1e-5)
  for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
    np.testing.assert_allclose(g, w, atol=1e-4 * float(jnp.max(jnp.abs(w))))
  jaxpr = str(jax.make_jaxpr(lambda p, x: nnx.merge(graphdef, p)(x))(params, x))
  assert "ragged_dot" in jaxpr


def test_sort_by_expert_groups_rows_contiguously():
  experts = jnp.array([[2, 0], [1, 2], [2, 3], [0, 1]], jnp.int32)
  order, sizes = sort_by_expert(experts, num_experts=5)
  flat = np.asarray(experts).reshape(-1)[np.asarray(order)]
  np.testing.assert_array_equal(flat, [0, 0, 1, 1, 2, 2, 2, 3])
  np.testing.assert_array_equal(sizes, [2, 2, 3, 1, 0])
  np.testing.assert_array_equal(np.sort(order), np.arange(8))
