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
from spade_jax.model.sharding import constrain

# Queries and attention outputs [B, T, N, Hd] with a cache: where the engine's kv heads do
# not split over the chips its cache splits by slots, and without these constraints XLA
# gathered the query and output projections' weights rather than move the activations.
_HEADS = ("batch", "length", "q_heads", "head_dim")

# Finite "minus infinity": a query with no visible key (a padding token) gets uniform weights
# instead of NaNs; its output is never used.
_MASKED = float(jnp.finfo(jnp.float32).min)


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
                                       fallback=cached_attention), _HEADS)
    else:  # the kernel chosen by config.model.attention_impl for this platform
      out = self_attention(impl, q, k, v, mask, self.scale)
    return self.o_proj(out), new_kv
