"""Qwen3-MoE sparse block: fp32 softmax router, top-k, dropless sorted dispatch with ragged_dot.

Each token's k (token, expert) assignments are sorted by expert so that every expert's rows
are contiguous; `jax.lax.ragged_dot` then runs one grouped GEMM per projection over the
stacked [E, ...] weights. Every expert only sees the rows routed to it (no token is dropped
and no expert computes tokens it was not chosen for), and the results are un-permuted and
summed with the routing weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model.config import ModelConfig
from spade_jax.model.layers import Einsum, normal_param


def route(logits: jax.Array, top_k: int, norm_topk_prob: bool) -> tuple[jax.Array, jax.Array]:
  """logits [N, E] -> (weights [N, k] fp32, experts [N, k] int32), as Qwen3MoeTopKRouter."""
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  weights, experts = jax.lax.top_k(probs, top_k)
  if norm_topk_prob:
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
  return weights, experts.astype(jnp.int32)


def sort_by_expert(experts: jax.Array, num_experts: int) -> tuple[jax.Array, jax.Array]:
  """experts [N, k] -> (order [N*k] into the flattened assignments, group_sizes [E] int32)."""
  flat = experts.reshape(-1)
  order = jnp.argsort(flat, stable=True)
  group_sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
  return order, group_sizes


class GroupedKernel(nnx.Module):
  """Stacked expert kernel [E, in, out] applied to expert-sorted rows with ragged_dot."""

  def __init__(self, shape: Sequence[int], axes: Sequence[str], *, param_dtype: jnp.dtype,
               compute_dtype: jnp.dtype, rngs: nnx.Rngs):
    self.compute_dtype = compute_dtype
    self.kernel = normal_param(rngs, shape, axes, param_dtype)

  def __call__(self, rows: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """rows [M, in] sorted by expert, group_sizes [E] summing to M -> [M, out]."""
    return jax.lax.ragged_dot(rows.astype(self.compute_dtype),
                              self.kernel[...].astype(self.compute_dtype), group_sizes)


class MoEBlock(nnx.Module):
  """Qwen3MoeSparseMoeBlock: router + SwiGLU experts with stacked [E, ...] weights."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    pd, cd = jnp.dtype(cfg.param_dtype), jnp.dtype(cfg.compute_dtype)
    self.num_experts = e
    self.top_k = cfg.num_experts_per_tok
    self.norm_topk_prob = cfg.norm_topk_prob
    # The router always runs in fp32: routing decisions are sensitive to rounding.
    self.router = Einsum("nd,de->ne", (d, e), ("embed", "expert_logits"), param_dtype=pd,
                         compute_dtype=jnp.dtype(jnp.float32), rngs=rngs)
    dt = dict(param_dtype=pd, compute_dtype=cd, rngs=rngs)
    self.gate_proj = GroupedKernel((e, d, f), ("expert", "embed", "mlp"), **dt)
    self.up_proj = GroupedKernel((e, d, f), ("expert", "embed", "mlp"), **dt)
    self.down_proj = GroupedKernel((e, f, d), ("expert", "mlp", "embed"), **dt)

  def __call__(self, x: jax.Array) -> jax.Array:
    """x [B, T, D] -> [B, T, D]."""
    b, t, d = x.shape
    tokens = x.reshape(b * t, d)  # [N, D]
    weights, experts = route(self.router(tokens), self.top_k, self.norm_topk_prob)  # [N, k]
    order, group_sizes = sort_by_expert(experts, self.num_experts)  # [N*k], [E]
    rows = tokens[order // self.top_k]  # [N*k, D], grouped by expert
    hidden = jax.nn.silu(self.gate_proj(rows, group_sizes)) * self.up_proj(rows, group_sizes)
    out = self.down_proj(hidden, group_sizes)  # [N*k, D]
    out = out[jnp.argsort(order)].reshape(b * t, self.top_k, d)  # back to assignment order
    out = jnp.einsum("nkd,nk->nd", out, weights.astype(out.dtype))
    return out.reshape(b, t, d)
