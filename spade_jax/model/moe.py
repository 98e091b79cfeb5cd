"""Qwen3-MoE sparse block: fp32 softmax router, top-k, dropless sorted dispatch with ragged_dot.

Each token's k (token, expert) assignments are sorted by expert so that every expert's rows
are contiguous; `jax.lax.ragged_dot` then runs one grouped GEMM per projection over the
stacked [E, ...] weights. Every expert only sees the rows routed to it (no token is dropped
and no expert computes tokens it was not chosen for), and the results are un-permuted and
summed with the routing weights.

Under a mesh the block runs in `jax.shard_map`: every batch shard (the "batch" rule's axes)
routes, sorts and dispatches only its own tokens, so no collective carries the dispatched
rows of the whole micro-batch. The expert kernels are gathered on their "embed" dimension
(FSDP gathers a layer's weights anyway; their gradients are reduce-scattered) and keep their
"expert" and "mlp" shards: a chip computes the rows of the experts it holds on its slice of
the expert width, and one psum of the combined [N_shard, D] output over those axes adds the
other experts and slices. Tokens are replicated over the expert and tensor axes (the "batch"
rule does not split them), so every chip already holds the tokens its experts need and no
all-to-all is involved. Where gathering the kernels would move more than the rows (a few
tokens, as in decode), one sort over all tokens runs instead and GSPMD moves the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec

from spade_jax.model.config import ModelConfig
from spade_jax.model.layers import Einsum, normal_param
from spade_jax.model.sharding import logical_to_spec


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
    """rows [M, in] sorted by expert, group_sizes [E] -> [M, out]; rows past the groups'
    sum come out zero."""
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
    """x [B, T, D] -> [B, T, D]; per batch shard under a mesh, where that moves less."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1 or not self.per_shard(x.shape[0] * x.shape[1], mesh):
      return self.dispatch(x)
    x_spec = logical_to_spec(("batch", None, None), x.shape, mesh)
    split = _axes(x_spec[0])  # the mesh axes that split the tokens
    graphdef, state = nnx.split(self)
    specs = jax.tree.map(lambda v: v.replace(_spec(v, mesh, split)), state, is_leaf=_is_variable)
    kernel_spec = _spec(self.gate_proj.kernel, mesh, split)  # [E, D, F]
    expert_axes, split_axes = _axes(kernel_spec[0]), _axes(kernel_spec[0], kernel_spec[2])

    def shard(state, x):
      block = nnx.merge(graphdef, jax.tree.map(_gather_embed, state, specs, is_leaf=_is_variable))
      held = block.gate_proj.kernel.shape[0]
      first = jax.lax.axis_index(expert_axes) * held if expert_axes else 0
      out = block.dispatch(x, first)  # [B_shard, T, D]: this chip's experts and mlp slice
      return jax.lax.psum(out, split_axes) if split_axes else out

    return jax.shard_map(shard, in_specs=(specs, x_spec), out_specs=x_spec)(state, x)

  def per_shard(self, tokens: int, mesh: jax.sharding.AbstractMesh) -> bool:
    """Whether routing per batch shard moves less than one sort of all `tokens`.

    Per shard, every chip gathers its experts' kernels (when "embed" is split); the global
    sort instead all-reduces the dispatched rows, [tokens * k, D] and twice [tokens * k, F],
    and an all-reduce moves each byte twice. The rows are fewer for a few tokens (decode: a
    layer's experts dwarf them), the kernels for a training micro-batch."""
    kernel = self.gate_proj.kernel
    spec = logical_to_spec(kernel.get_metadata()["logical_axes"], kernel.shape, mesh)
    if not _axes(spec[1]):
      return True  # the kernels stay where they are
    e, d, f = kernel.shape
    held = e * f // math.prod(mesh.shape[a] for a in _axes(spec[0], spec[2]))  # E_held * F_held
    return 2 * tokens * self.top_k * (d + 2 * f) >= 3 * held * d

  def dispatch(self, x: jax.Array, first_expert: jax.Array | int = 0) -> jax.Array:
    """x [B, T, D] -> [B, T, D] from the experts whose kernels this block holds: [E_held, ...]
    kernels of experts first_expert .. first_expert + E_held - 1 (all E outside a shard_map).
    Assignments to other experts contribute zero."""
    b, t, d = x.shape
    held = self.gate_proj.kernel.shape[0]
    tokens = x.reshape(b * t, d)  # [N, D]
    weights, experts = route(self.router(tokens), self.top_k, self.norm_topk_prob)  # [N, k]
    local = (experts - first_expert) % self.num_experts  # [N, k]: held experts are 0..held-1
    order, group_sizes = sort_by_expert(local, self.num_experts)  # [N*k], [E]
    sizes = group_sizes[:held]  # the rows of other experts follow and are not computed
    rows = tokens[order // self.top_k]  # [N*k, D], grouped by expert
    hidden = jax.nn.silu(self.gate_proj(rows, sizes)) * self.up_proj(rows, sizes)
    out = self.down_proj(hidden, sizes)  # [N*k, D]
    out = out[jnp.argsort(order)].reshape(b * t, self.top_k, d)  # back to assignment order
    out = jnp.where((local < held)[..., None], out, jnp.zeros((), out.dtype))  # [N, k, D]
    out = jnp.einsum("nkd,nk->nd", out, weights.astype(out.dtype))
    return out.reshape(b, t, d)


def _is_variable(x) -> bool:
  return isinstance(x, nnx.Variable)


def _spec(var: nnx.Variable, mesh: jax.sharding.AbstractMesh,
          split: tuple[str, ...]) -> PartitionSpec:
  """A parameter's PartitionSpec as it enters the shard_map: its own, but its "embed"
  dimension split only over `split`, the axes that split the tokens (the shard_map gathers
  it over those; GSPMD gathers the rest before, where every chip holds the same tokens)."""
  names = var.get_metadata()["logical_axes"]
  spec = logical_to_spec(names, var.get_value().shape, mesh)
  return PartitionSpec(*((tuple(a for a in _axes(e) if a in split) or None) if n == "embed" else e
                         for n, e in zip(names, spec, strict=True)))


def _gather_embed(var: nnx.Variable, spec: nnx.Variable) -> nnx.Variable:
  """A parameter's shard with its "embed" dimension all-gathered (inside the shard_map), as
  FSDP gathers a layer's weights; the gradient comes back reduce-scattered."""
  names = var.get_metadata()["logical_axes"]
  dim = names.index("embed") if "embed" in names else None
  axes = () if dim is None else _axes(spec.get_value()[dim])
  if not axes:
    return var
  return var.replace(jax.lax.all_gather(var.get_value(), axes, axis=dim, tiled=True))


def _axes(*entries: str | tuple[str, ...] | None) -> tuple[str, ...]:
  """The mesh axes named by PartitionSpec entries, in order."""
  names: list[str] = []
  for e in entries:
    names.extend((e,) if isinstance(e, str) else e or ())
  return tuple(names)
