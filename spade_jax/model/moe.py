"""Qwen3-MoE sparse block: fp32 softmax router, top-k, dropless sorted dispatch with ragged_dot.

Each token's k (token, expert) assignments are sorted by expert so that every expert's rows
are contiguous; `jax.lax.ragged_dot` then runs one grouped GEMM per projection over the
stacked [E, ...] weights. Every expert only sees the rows routed to it (no token is dropped
and no expert computes tokens it was not chosen for), and the results are un-permuted and
summed with the routing weights.

Under a mesh the block runs in `jax.shard_map`: every batch shard (the "batch" rule's axes)
routes, sorts and dispatches only its own tokens, so no collective carries the dispatched rows
of the whole micro-batch. The expert kernels are gathered on their "embed" dimension (FSDP
gathers a layer's weights anyway; their gradients are reduce-scattered) and keep their
"expert" and "mlp" shards. Where the experts are split over the expert axis (G chips, E / G
experts each), expert parallelism: the G chips of a batch shard each take 1/G of its tokens
(padded to a multiple of G), route and sort them, and `jax.lax.ragged_all_to_all` sends every
row to the chip holding its expert (all-gathered counts per sender, receiver and expert tell
each sender where its rows land: after those of the senders before it). The receiver regroups
the rows by expert, runs its experts, and a second ragged all-to-all (also the first one's
transpose) returns them to be weighted and summed; an all-gather over the expert axis of the
batch shard's [N_shard, D] output undoes the token split. The receive buffer holds the worst
case, every row of the G chips ([N_shard * k, D]), so no row is dropped. XLA:CPU does not
implement ragged-all-to-all; there an all_to_all of every slice padded to the sender's rows
gives the same result. Without an expert split every chip holds all experts and computes its
batch shard's rows. Either way a chip computes its slice of the expert width ("mlp") and a
psum of the combined output over those axes adds the slices. Where gathering the kernels
would move more than the rows (a few tokens, as in decode), one sort over all tokens runs
instead and GSPMD moves the rows.
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
from spade_jax.model.platform import current_platform
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
    b, t, d = x.shape
    if mesh.empty or mesh.size == 1 or not self.per_shard(b * t, mesh):
      return self.dispatch(x.reshape(b * t, d)).reshape(b, t, d)
    x_spec = logical_to_spec(("batch", None, None), x.shape, mesh)
    split = _axes(x_spec[0])  # the mesh axes that split the batch
    graphdef, state = nnx.split(self)
    specs = jax.tree.map(lambda v: v.replace(_spec(v, mesh, split)), state, is_leaf=_is_variable)
    kernel_spec = _spec(self.gate_proj.kernel, mesh, split)  # [E, D, F]
    expert_axes, mlp_axes = _axes(kernel_spec[0]), _axes(kernel_spec[2])
    shards = math.prod(mesh.shape[a] for a in split)
    groups = math.prod(mesh.shape[a] for a in expert_axes)
    n = b * t // shards  # one batch shard's tokens, split again over the expert axes
    tokens = jnp.pad(x.reshape(shards, n, d), ((0, 0), (0, -n % groups), (0, 0)))
    tokens_spec = PartitionSpec(split or None, expert_axes or None, None)

    def shard(state, tokens):  # tokens [1, N_local, D]
      block = nnx.merge(graphdef, jax.tree.map(_gather_embed, state, specs, is_leaf=_is_variable))
      out = block.exchange(tokens[0], expert_axes) if expert_axes else block.dispatch(tokens[0])
      return (jax.lax.psum(out, mlp_axes) if mlp_axes else out)[None]  # the mlp slices added

    out = jax.shard_map(shard, in_specs=(specs, tokens_spec), out_specs=tokens_spec)(state, tokens)
    return jax.lax.with_sharding_constraint(out[:, :n].reshape(b, t, d), x_spec)

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

  def dispatch(self, tokens: jax.Array) -> jax.Array:
    """tokens [N, D] -> [N, D] through all E experts (the block holds every expert's kernels)."""
    weights, experts = route(self.router(tokens), self.top_k, self.norm_topk_prob)  # [N, k]
    order, group_sizes = sort_by_expert(experts, self.num_experts)  # [N*k], [E]
    rows = tokens[order // self.top_k]  # [N*k, D], grouped by expert
    return self.combine(self.experts(rows, group_sizes), order, weights)

  def exchange(self, tokens: jax.Array, axes: tuple[str, ...]) -> jax.Array:
    """tokens [N, D] -> [N, D] with the experts split over the mesh axes `axes` (inside a
    shard_map, G chips along them each holding E / G experts' kernels): every (token, expert)
    row travels to the chip holding its expert, is computed there and travels back."""
    n = tokens.shape[0]
    held = self.gate_proj.kernel.shape[0]
    chips = self.num_experts // held
    me = jax.lax.axis_index(axes)
    weights, experts = route(self.router(tokens), self.top_k, self.norm_topk_prob)  # [N, k]
    order, group_sizes = sort_by_expert(experts, self.num_experts)  # [N*k], [E]
    rows = tokens[order // self.top_k]  # [N*k, D], grouped by expert, so by destination
    # sizes[s, r, e]: the rows chip s sends chip r for r's e-th expert
    sizes = jax.lax.all_gather(group_sizes, axes).reshape(chips, chips, held)
    counts = jnp.sum(sizes, axis=-1)  # [G, G]: sender, receiver
    send, recv = counts[me], counts[:, me]  # [G], [G]
    send_at, recv_at = _starts(send), _starts(recv)  # the slices in rows, in what arrives
    land_at = _starts(counts, axis=0)[me]  # [G]: where this chip's rows land on each receiver
    back_at = _starts(counts, axis=1)[:, me]  # [G]: where each sender's rows go back
    size = n * self.top_k * chips  # every row of the G chips' tokens, at most
    received = _ragged_all_to_all(rows, size, send_at, send, land_at, recv,
                                  axes)  # [size, D]: by sender, then by expert
    local = sizes[:, me]  # [G, E_held]: the received rows per sender and expert
    expert_ids = jnp.repeat(jnp.append(jnp.tile(jnp.arange(held), chips), held),
                            jnp.append(local.reshape(-1), size - jnp.sum(local)),
                            total_repeat_length=size)  # [size]; held past the rows
    regroup = jnp.argsort(expert_ids, stable=True)  # [size]
    out = self.experts(received[regroup], jnp.sum(local, axis=0))[jnp.argsort(regroup)]
    out = _ragged_all_to_all(out, n * self.top_k, recv_at, recv, back_at, send,
                             axes)  # [N*k, D], as rows
    return self.combine(out, order, weights)

  def experts(self, rows: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """rows [M, D] grouped by expert, group_sizes [E_held] -> [M, D] through the SwiGLU experts;
    rows past the groups' sum come out zero."""
    hidden = jax.nn.silu(self.gate_proj(rows, group_sizes)) * self.up_proj(rows, group_sizes)
    return self.down_proj(hidden, group_sizes)

  def combine(self, out: jax.Array, order: jax.Array, weights: jax.Array) -> jax.Array:
    """out [N*k, D] in `order` -> [N, D]: un-permuted and summed with weights [N, k]."""
    n, k = weights.shape
    out = out[jnp.argsort(order)].reshape(n, k, out.shape[-1])  # back to assignment order
    return jnp.einsum("nkd,nk->nd", out, weights.astype(out.dtype))


def _starts(sizes: jax.Array, axis: int = 0) -> jax.Array:
  """Where consecutive slices of `sizes` along `axis` start: the exclusive cumulative sum."""
  return jnp.cumsum(sizes, axis=axis) - sizes


def _ragged_all_to_all(operand: jax.Array, size: int, input_offsets: jax.Array,
                       send_sizes: jax.Array, output_offsets: jax.Array, recv_sizes: jax.Array,
                       axes: tuple[str, ...]) -> jax.Array:
  """`jax.lax.ragged_all_to_all` of rows operand [M, D] over `axes` (one slice per chip) into
  [size, D] zeros; on XLA:CPU, which does not implement it, the same result from an all_to_all
  of every slice padded to M rows."""
  # zeros_like: varying over the operand's mesh axes, so is the result (ragged_all_to_all
  # takes its output's type); an invariant result's cotangent would be summed over the chips.
  output = jnp.zeros_like(operand, shape=(size, operand.shape[-1]))
  if current_platform() != "cpu":
    return jax.lax.ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
                                     recv_sizes, axis_name=axes)
  m = operand.shape[0]
  i = jnp.arange(m)[None]  # [1, M]
  sent = operand[jnp.minimum(input_offsets[:, None] + i, m - 1)]  # [G, M, D]
  sent = jnp.where((i < send_sizes[:, None])[..., None], sent, jnp.zeros((), sent.dtype))
  got = jax.lax.all_to_all(sent, axes, 0, 0, tiled=True)  # [G, M, D]: by sender
  at = jax.lax.all_to_all(output_offsets, axes, 0, 0, tiled=True)  # [G]: each sender's offset
  to = jnp.where(i < recv_sizes[:, None], at[:, None] + i, output.shape[0])  # [G, M]
  return output.at[to.reshape(-1)].set(got.reshape(-1, operand.shape[-1]), mode="drop")


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
