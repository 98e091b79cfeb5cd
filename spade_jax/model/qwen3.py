"""Qwen3 / Qwen3-MoE decoder in Flax NNX, numerically matching Hugging Face transformers.

Consecutive layers of one kind (dense or MoE: `ModelConfig.layer_groups`) are one group,
stored as one `DecoderLayer` whose parameters have a leading layer axis (logical name
"layers", replicated) and run by one `jax.lax.scan`: XLA compiles one layer body whatever
the depth, and a layer's gathered weights and activations are those of one loop iteration.
Dense models and all-MoE models are one group; Qwen3-MoE with `mlp_only_layers` or a
`decoder_sparse_step` is a few groups in order. The KV cache holds one stacked buffer per
group, carried through its scan. `hf_io.tensor_maps` addresses each layer's slice, so
Hugging Face checkpoints load and save one tensor per layer as before; `Qwen3.layer(i)`
gives one layer as a plain module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model.attention import Attention
from spade_jax.model.attention_impl import resolve_attention_impl, self_mask
from spade_jax.model.config import REMAT_POLICIES, ModelConfig, resolve_remat
from spade_jax.model.kv_cache import KVCache, Rows, read_window, row_ids, write_entries
from spade_jax.model.layers import Einsum, Embed, RMSNorm, rope_cos_sin
from spade_jax.model.lora import add_adapters
from spade_jax.model.moe import MoEBlock
from spade_jax.model.sharding import constrain

_ACT = ("batch", "length", None)  # activations [B, T, D]: rows over data and fsdp


class MLP(nnx.Module):
  """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    d, f = cfg.hidden_size, cfg.intermediate_size
    dt = dict(param_dtype=jnp.dtype(cfg.param_dtype), compute_dtype=jnp.dtype(cfg.compute_dtype),
              rngs=rngs)
    self.gate_proj = Einsum("btd,df->btf", (d, f), ("embed", "mlp"), **dt)
    self.up_proj = Einsum("btd,df->btf", (d, f), ("embed", "mlp"), **dt)
    self.down_proj = Einsum("btf,fd->btd", (f, d), ("mlp", "embed"), **dt)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
  """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

  def __init__(self, cfg: ModelConfig, moe: bool, *, rngs: nnx.Rngs):
    pd = jnp.dtype(cfg.param_dtype)
    self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, "norm", param_dtype=pd)
    self.attn = Attention(cfg, rngs=rngs)
    self.post_attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, "norm", param_dtype=pd)
    self.mlp = MoEBlock(cfg, rngs=rngs) if moe else MLP(cfg, rngs=rngs)

  def __call__(self, x, cos, sin, mask, kv=None, write_at=None, rows=None, read_len=None,
               layer=None):
    """x [B, T, D] -> (x [B, T, D], updated kv); kv and `layer` as in Attention."""
    attn_out, kv = self.attn(self.input_norm(x), cos, sin, mask, kv, write_at, rows, read_len,
                             layer)
    x = x + attn_out
    x = x + self.mlp(self.post_attn_norm(x))
    return constrain(x, _ACT), kv


def _is_variable(x) -> bool:
  return isinstance(x, nnx.Variable)


def stacked_layers(cfg: ModelConfig, moe: bool, count: int, rngs: nnx.Rngs) -> DecoderLayer:
  """`count` fresh layers of one kind as one DecoderLayer whose parameters are stacked
  [count, ...] (logical axis "layers"); each layer is initialised from its own key."""
  graphdef = nnx.graphdef(nnx.eval_shape(lambda: DecoderLayer(cfg, moe, rngs=nnx.Rngs(0))))
  one = lambda key: nnx.state(DecoderLayer(cfg, moe, rngs=nnx.Rngs(params=key)))
  state = jax.vmap(one)(jax.random.split(rngs.params(), count))
  add_axis = lambda v: v.replace(logical_axes=("layers", *v.get_metadata()["logical_axes"]))
  return nnx.merge(graphdef, jax.tree.map(add_axis, state, is_leaf=_is_variable))


def split_layers(group: DecoderLayer) -> tuple[nnx.GraphDef, nnx.State]:
  """A stacked group's graphdef and state, the state's metadata that of one layer (values
  still stacked [L_g, ...]): each slice of it merges into a plain DecoderLayer."""
  graphdef, state = nnx.split(group)
  drop_axis = lambda v: v.replace(logical_axes=v.get_metadata()["logical_axes"][1:])
  return graphdef, jax.tree.map(drop_axis, state, is_leaf=_is_variable)


def _scan_layers(group: DecoderLayer, x, cos, sin, mask, policy) -> jax.Array:
  """x [B, T, D] through every layer of a group in one scan (no cache: training). With a
  remat policy the body is rematerialised: the backward pass keeps each layer's input."""
  graphdef, state = split_layers(group)

  def body(x, layer_state):  # one layer: [B, T, D] -> [B, T, D]
    return nnx.merge(graphdef, layer_state)(x, cos, sin, mask)[0], None

  if policy is not None:
    body = jax.checkpoint(body, policy=policy, prevent_cse=False)
  return jax.lax.scan(body, x, state)[0]


def _scan_cached_layers(group: DecoderLayer, x, kv, cos, sin, mask, write_at, rows, read_len):
  """x [B, T, D] through every layer of a group in one scan, carrying the group's stacked
  cache kv = (k [L_g, S_all, ...], v [L_g, S_all, ...]); layer i writes and reads slice i."""
  graphdef, state = split_layers(group)

  def body(carry, xs):
    x, kv = carry
    layer_state, i = xs
    x, kv = nnx.merge(graphdef, layer_state)(x, cos, sin, mask, kv, write_at, rows, read_len, i)
    return (x, kv), None

  index = jnp.arange(kv[0].shape[0], dtype=jnp.int32)  # [L_g]
  return jax.lax.scan(body, (x, kv), (state, index))[0]


def default_positions(valid: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
  """Position ids [B, T]: count of real tokens before each one within its segment; pads -1."""
  v = valid.astype(jnp.int32)
  count = jnp.cumsum(v, axis=1)  # real tokens up to and including t
  if segment_ids is not None:
    starts = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool),
                              segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
    count = count - jax.lax.cummax(jnp.where(starts, count - v, 0), axis=1)
  return jnp.where(valid, count - 1, -1)


class Qwen3(nnx.Module):
  """Qwen3 causal LM. See docs/model.md for the call conventions and the parameter tree."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    pd, cd = jnp.dtype(cfg.param_dtype), jnp.dtype(cfg.compute_dtype)
    self.cfg = cfg
    self.embed = Embed(cfg.vocab_size, cfg.hidden_size, param_dtype=pd, compute_dtype=cd,
                       rngs=rngs)
    self.groups = nnx.List([stacked_layers(cfg, moe, n, rngs) for moe, n in cfg.layer_groups()])
    self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, "norm", param_dtype=pd)
    if not cfg.tie_word_embeddings:
      self.lm_head = Einsum("btd,dv->btv", (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"),
                            param_dtype=pd, compute_dtype=cd, out_dtype=jnp.float32, rngs=rngs)
    if cfg.lora_rank > 0:  # after the base weights: the same seed gives the same base
      add_adapters(self, cfg, rngs)

  def __call__(self, input_ids, positions=None, attention_mask=None, segment_ids=None,
               cache: KVCache | None = None):
    """Logits [B, T, V] float32, or (logits, updated cache) when `cache` is given."""
    out = self.hidden(input_ids, positions, attention_mask, segment_ids, cache)
    if cache is None:
      return self.logits_from_hidden(out)
    return self.logits_from_hidden(out[0]), out[1]

  def layer(self, i: int) -> DecoderLayer:
    """Decoder layer i as a plain module: a copy of its slice of its group. Edits to it
    reach the model only through `set_layer`."""
    g, j = self.cfg.layer_position(i)
    graphdef, state = split_layers(self.groups[g])
    pick = lambda v: v.replace(v.get_value()[j])
    return nnx.merge(graphdef, jax.tree.map(pick, state, is_leaf=_is_variable))

  def set_layer(self, i: int, layer: DecoderLayer) -> None:
    """Writes `layer` (e.g. an edited `self.layer(i)`) into slice i of its group, in place."""
    g, j = self.cfg.layer_position(i)
    put = lambda s, n: s.replace(s.get_value().at[j].set(n.get_value()))
    group = self.groups[g]
    nnx.update(group, jax.tree.map(put, nnx.state(group), nnx.state(layer), is_leaf=_is_variable))

  def logits_from_hidden(self, h: jax.Array, head: jax.Array | None = None,
                         axes: tuple[str | None, ...] = ("batch", "length", "vocab"),
                         ) -> jax.Array:
    """h [B, T, D] (after the final norm) -> logits [B, T, V] float32, laid out as `axes`.

    `head` replaces the head's weight (`head_weight()`, resharded: the loss passes it split
    over the vocabulary)."""
    if self.cfg.tie_word_embeddings:
      logits = self.embed.attend(h, head)
    else:
      logits = self.lm_head(h, head)
    return constrain(logits.astype(jnp.float32), axes)

  def head_weight(self) -> tuple[jax.Array, int]:
    """The LM head's weight and its vocabulary axis: the tied embedding [V, D] (axis 0) or
    the head's kernel [D, V] (axis 1)."""
    if self.cfg.tie_word_embeddings:
      return self.embed.embedding[...], 0
    return self.lm_head.kernel[...], 1

  def hidden(self, input_ids, positions=None, attention_mask=None, segment_ids=None,
             cache: KVCache | None = None, rows: Rows = None, read_len: int | None = None):
    """Final-norm hidden states [B, T, D] (and the updated cache when `cache` is given).

    Without a cache: token i attends token j <= i of its row when j is real (mask 1 and
    position >= 0) and, with segment_ids, in the same segment. Positions default to the count
    of earlier real tokens (per segment), so left padding and packing need no positions.
    With a cache: see kv_cache.py; positions default to continuing each row. `rows` picks the
    cache rows the B input rows use (None: all, B == cache rows; else an index array [B])
    and `read_len` (static) how many entries of each attention reads; the new entries must
    land inside it. The returned cache is the whole cache, updated.
    """
    ids, positions, valid, segment_ids = self._check_inputs(
        input_ids, positions, attention_mask, segment_ids, cache, rows)
    t = ids.shape[1]
    if cache is not None:
      write_at = read_window(cache.end, rows)  # [B]
      if positions is None:
        last = jnp.max(read_window(cache.pos, rows, read_len), axis=1)  # [B]
        positions = default_positions(valid, None) + (last + 1)[:, None]
    elif positions is None:
      positions = default_positions(valid, segment_ids)
    positions = jnp.where(valid, positions, -1).astype(jnp.int32)  # [B, T], -1 = pad
    if cache is None:  # [B, T, T] bool, or [B, T] segment ids for a fused kernel
      impl = resolve_attention_impl(self.cfg.attention_impl, self.cfg.compute_dtype)
      mask = self_mask(impl, positions, segment_ids)
    else:
      full_pos = write_entries(cache.pos, positions, rows, write_at)  # [S_all, L]
      entry_pos = read_window(full_pos, rows, read_len)  # [B, S]
      mask = ((entry_pos[:, None, :] >= 0)
              & (entry_pos[:, None, :] <= positions[:, :, None]))  # [B, T, S]
    cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta)
    x = constrain(self.embed(ids), _ACT)  # [B, T, D]
    if cache is None:
      policy = REMAT_POLICIES[resolve_remat(self.cfg.remat)]  # for the training pass
      for group in self.groups:
        x = _scan_layers(group, x, cos, sin, mask, policy)
      return self.final_norm(x)
    new_k, new_v = [], []
    for group, k, v in zip(self.groups, cache.k, cache.v, strict=True):
      x, (k, v) = _scan_cached_layers(group, x, (k, v), cos, sin, mask, write_at, rows, read_len)
      new_k.append(k)
      new_v.append(v)
    end = cache.end.at[row_ids(rows, ids.shape[0])].set(write_at + t, mode="drop")
    return self.final_norm(x), KVCache(k=tuple(new_k), v=tuple(new_v), pos=full_pos, end=end)

  def _check_inputs(self, input_ids, positions, attention_mask, segment_ids, cache, rows):
    """Validates shapes and dtypes early; returns (ids, positions, valid [B, T], segment_ids)."""
    ids = jnp.asarray(input_ids)
    if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(f"input_ids must be an integer array [B, T], got {ids.dtype}{ids.shape}")
    for name, arr in (("positions", positions), ("attention_mask", attention_mask),
                      ("segment_ids", segment_ids)):
      if arr is not None and jnp.shape(arr) != ids.shape:
        raise ValueError(f"{name} shape {jnp.shape(arr)} != input_ids shape {ids.shape}")
    positions = None if positions is None else jnp.asarray(positions)
    segment_ids = None if segment_ids is None else jnp.asarray(segment_ids)
    valid = (jnp.ones(ids.shape, bool) if attention_mask is None
             else jnp.asarray(attention_mask) != 0)
    if cache is not None:
      if segment_ids is not None:
        raise ValueError("segment_ids (packed rows) cannot be combined with a KV cache")
      rows_seen = cache.batch_size if rows is None else jnp.shape(rows)[0]
      groups = tuple(n for _, n in self.cfg.layer_groups())
      if rows_seen != ids.shape[0] or tuple(k.shape[0] for k in cache.k) != groups:
        raise ValueError(f"cache holds {cache.batch_size} rows x {cache.num_layers} layers "
                         f"({rows_seen} selected); input has {ids.shape[0]} rows, model "
                         f"{self.cfg.num_layers} layers")
      if ids.shape[1] > cache.max_len:
        raise ValueError(f"{ids.shape[1]} new tokens exceed the cache length {cache.max_len}")
    return ids, positions, valid, segment_ids
