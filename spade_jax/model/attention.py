"""Qwen3 grouped-query attention with per-head q/k RMSNorm, RoPE and an optional KV cache."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model.attention_impl import (
  decode_attention,
  resolve_attention_impl,
  self_attention,
)
from spade_jax.model.config import ModelConfig
from spade_jax.model.kv_cache import (
  V_ENTRY_AXIS,
  Rows,
  key_entry_axis,
  read_window,
  write_entries,
)
from spade_jax.model.layers import Einsum, RMSNorm, apply_rope
from spade_jax.model.platform import current_platform
from spade_jax.model.sharding import constrain

# Queries and attention outputs [B, T, N, Hd] with a cache: where the engine's kv heads do
# not split over the chips its cache splits by slots, and without these constraints XLA
# gathered the query and output projections' weights rather than move the activations.
_HEADS = ("batch", "length", "q_heads", "head_dim")

# Finite "minus infinity": a query with no visible key (a padding token) gets uniform weights
# instead of NaNs; its output is never used.
_MASKED = float(jnp.finfo(jnp.float32).min)
QUERY_BLOCK = 512  # queries per block of blocked_cached_attention
KEY_BLOCK = 512  # keys per step of its online softmax


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                          scale: float) -> jax.Array:
  """q [B, T, N, Hd]; k, v [B, S, K, Hd]; mask [B, T, S] bool (True = visible) -> [B, T, N, Hd].

  Query head n reads kv head n // (N // K), as Hugging Face's repeat_kv does. Scores and
  softmax run in fp32; the weighted sum runs in v's dtype. The plain full-square form: the
  reference the faster paths (train_attention.causal_attention, cached_attention) are
  tested against.
  """
  return _einsum_attention(q, k, v, mask, scale, "bskh", "bskh")


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                     scale: float) -> jax.Array:
  """dot_product_attention over keys and values in the cache layout: k [B, K, Hd, S] on CPU,
  [B, K, S, Hd] elsewhere; v [B, K, S, Hd] (see KVCache)."""
  return _einsum_attention(q, k, v, mask, scale, "bkhs" if key_entry_axis() == 3 else "bksh",
                           "bksh")


def _einsum_attention(q, k, v, mask, scale, k_spec: str, v_spec: str):
  """The batched-dot form; k_spec / v_spec name the axes of k / v (b, s, k, h).

  Queries are grouped per kv head as [B, K, T, G, Hd], so each (row, kv head) is one
  [T*G, Hd] x [Hd, S] product. (With scores laid out [B, K, G, T, S] instead, XLA's CPU
  backend chose transposed dot outputs, several times slower in decode.)
  """
  b, t, n, hd = q.shape
  kv_heads = k.shape[k_spec.index("k")]
  qg = q.reshape(b, t, kv_heads, n // kv_heads, hd).swapaxes(1, 2)  # [B, K, T, G, Hd]
  scores = jnp.einsum(f"bktgh,{k_spec}->bktgs", qg, k,
                      preferred_element_type=jnp.float32) * scale
  scores = jnp.where(mask[:, None, :, None], scores, _MASKED)  # [B, K, T, G, S]
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum(f"bktgs,{v_spec}->bktgh", probs, v)  # [B, K, T, G, Hd]
  return out.swapaxes(1, 2).reshape(b, t, n, hd)


def blocked_cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                             scale: float, query_block: int = QUERY_BLOCK,
                             key_block: int = KEY_BLOCK) -> jax.Array:
  """cached_attention over keys in the accelerator layout (k, v [B, K, S, Hd]) with at most
  one [query_block, key_block] fp32 score tile per (row, head) live, not [T, S].

  The form multi-token appends take on TPU, where the [B, K, T, G, S] fp32 scores of the
  einsum dominated the append's memory. Blocks of queries run one after another (lax.map),
  each an online softmax (flash attention's running max and sum) over steps of keys
  (lax.fori_loop). T and S are padded to whole blocks: pad queries are dropped, pad keys
  masked. A query block stops after the last key block any of its queries sees (past every
  row's end, and past the block's last position in a causal chunk): fully masked blocks add
  nothing to the softmax. Equal to cached_attention up to rounding for every query with a
  visible key.
  """
  b, t, n, hd = q.shape
  kv_heads, s = k.shape[1], k.shape[2]
  tq, tk = min(query_block, t), min(key_block, s)
  t_pad, s_pad = -(-t // tq) * tq, -(-s // tk) * tk
  qg = _pad_to(q, 1, t_pad).reshape(b, t_pad, kv_heads, n // kv_heads, hd).swapaxes(1, 2)
  k, v = _pad_to(k, 2, s_pad), _pad_to(v, 2, s_pad)  # [B, K, S', Hd]
  mask = _pad_to(_pad_to(mask, 1, t_pad), 2, s_pad)  # [B, T', S'], pads not visible

  def query_rows(i):  # -> [B, K, tq, G, Hd]
    qi = jax.lax.dynamic_slice_in_dim(qg, i * tq, tq, axis=2)  # [B, K, tq, G, Hd]
    mi = jax.lax.dynamic_slice_in_dim(mask, i * tq, tq, axis=1)  # [B, tq, S']
    init = (jnp.full(qi.shape[:-1], -jnp.inf, jnp.float32),
            jnp.zeros(qi.shape[:-1], jnp.float32), jnp.zeros(qi.shape, jnp.float32))
    seen = jnp.max(jnp.where(mi.any(axis=(0, 1)), jnp.arange(s_pad) + 1, 0))  # keys to read
    steps = jnp.maximum(-(-seen // tk), 1)  # a query that sees nothing gets uniform weights
    _, total, acc = jax.lax.fori_loop(
        0, steps, lambda j, carry: _key_step(qi, k, v, mi, scale, j * tk, tk, carry), init)
    return (acc / total[..., None]).astype(v.dtype)

  out = jax.lax.map(query_rows, jnp.arange(t_pad // tq))  # [T'/tq, B, K, tq, G, Hd]
  out = out.transpose(1, 0, 3, 2, 4, 5).reshape(b, t_pad, n, hd)
  return out[:, :t]


def _key_step(q, k, v, mask, scale, start, size, carry):
  """One online-softmax step over keys [start, start + size): q [B, K, tq, G, Hd]; k, v
  [B, K, S, Hd]; mask [B, tq, S]; carry (running max, running sum [B, K, tq, G], weighted
  values [B, K, tq, G, Hd]) in fp32."""
  top, total, acc = carry
  kj = jax.lax.dynamic_slice_in_dim(k, start, size, axis=2)  # [B, K, size, Hd]
  vj = jax.lax.dynamic_slice_in_dim(v, start, size, axis=2)
  mj = jax.lax.dynamic_slice_in_dim(mask, start, size, axis=2)  # [B, tq, size]
  scores = jnp.einsum("bktgh,bksh->bktgs", q, kj, preferred_element_type=jnp.float32) * scale
  scores = jnp.where(mj[:, None, :, None], scores, _MASKED)  # [B, K, tq, G, size]
  new_top = jnp.maximum(top, scores.max(axis=-1))
  probs = jnp.exp(scores - new_top[..., None])
  decay = jnp.exp(top - new_top)  # 0 at the first step (top = -inf)
  acc = acc * decay[..., None] + jnp.einsum("bktgs,bksh->bktgh", probs.astype(v.dtype), vj,
                                            preferred_element_type=jnp.float32)
  return new_top, total * decay + probs.sum(axis=-1), acc


def _pad_to(x: jax.Array, axis: int, size: int) -> jax.Array:
  """x zero- (False-) padded at the end of `axis` to `size`."""
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, pad)


def _cached_form(t: int):
  """The einsum over the whole window, except on TPU for T > 1 queries (prefill, append):
  there the blocked form, which never holds T x S scores."""
  return blocked_cached_attention if t > 1 and current_platform() == "tpu" else cached_attention


class Attention(nnx.Module):
  """Self-attention block: projections, q/k norm, RoPE, GQA, output projection."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    d, n, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    dt = dict(param_dtype=jnp.dtype(cfg.param_dtype), compute_dtype=jnp.dtype(cfg.compute_dtype))
    self.q_proj = Einsum("btd,dnh->btnh", (d, n, hd), ("embed", "q_heads", "head_dim"),
                         rngs=rngs, **dt)
    self.k_proj = Einsum("btd,dkh->btkh", (d, kv, hd), ("embed", "kv_heads", "head_dim"),
                         rngs=rngs, **dt)
    self.v_proj = Einsum("btd,dkh->btkh", (d, kv, hd), ("embed", "kv_heads", "head_dim"),
                         rngs=rngs, **dt)
    self.o_proj = Einsum("btnh,nhd->btd", (n, hd, d), ("q_heads", "head_dim", "embed"),
                         rngs=rngs, **dt)
    self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, "head_dim", param_dtype=dt["param_dtype"])
    self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, "head_dim", param_dtype=dt["param_dtype"])
    self.scale = hd ** -0.5
    self.attention_impl = cfg.attention_impl
    self.compute_dtype = cfg.compute_dtype

  def __call__(
      self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
      kv: tuple[jax.Array, jax.Array] | None = None, write_at: jax.Array | None = None,
      rows: Rows = None, read_len: int | None = None, layer: jax.Array | None = None,
  ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
    """x [B, T, D]; cos/sin [B, T, Hd]; mask [B, T, S] bool with a cache, else what
    `attention_impl.self_mask` gives for this config's kernel.

    Without a cache S == T. With `kv` (the whole cache of this layer's group, stacked:
    k [L_g, S_all, K, Hd, L], v [L_g, S_all, K, L, Hd]; this layer is slice `layer`) the
    new keys and values are first written at `write_at` [B] of the cache rows `rows` (see
    Qwen3.hidden), then attention reads those rows' first `read_len` entries (S of them).
    The slice is taken out, written and put back (updated in place): a scatter straight
    into the stacked buffer makes XLA's TPU compiler copy the group's whole cache into
    another layout at every layer.
    Returns the block output [B, T, D] and the updated (k, v) or None.
    """
    q = self.q_proj(x)  # [B, T, N, Hd]
    if kv is not None:  # split as the weights' heads, whichever way the cache is split
      q = constrain(q, _HEADS)
    q = apply_rope(self.q_norm(q), cos, sin)
    k = apply_rope(self.k_norm(self.k_proj(x)), cos, sin)  # [B, T, K, Hd]
    v = self.v_proj(x)  # [B, T, K, Hd]
    new_kv = None
    impl = resolve_attention_impl(self.attention_impl, self.compute_dtype)
    if kv is not None:
      ka = key_entry_axis()
      k_entries = k.transpose(0, 2, 3, 1) if ka == 3 else k.swapaxes(1, 2)  # in the cache layout
      k_all, v_all = (jax.lax.dynamic_index_in_dim(b, layer, 0, keepdims=False) for b in kv)
      k_all = write_entries(k_all, k_entries, rows, write_at, ka)  # this layer's [S_all, ...]
      v_all = write_entries(v_all, v.swapaxes(1, 2), rows, write_at, V_ENTRY_AXIS)
      new_kv = tuple(jax.lax.dynamic_update_index_in_dim(b, x, layer, 0)
                     for b, x in zip(kv, (k_all, v_all), strict=True))
      k = read_window(k_all, rows, read_len, ka).astype(q.dtype)  # cache layout, S entries
      v = read_window(v_all, rows, read_len, V_ENTRY_AXIS).astype(q.dtype)  # [B, K, S, Hd]
      out = constrain(decode_attention(impl, q, k, v, mask, self.scale,
                                       fallback=_cached_form(q.shape[1])), _HEADS)
    else:  # the kernel chosen by config.model.attention_impl for this platform
      out = self_attention(impl, q, k, v, mask, self.scale)
    return self.o_proj(out), new_kv
