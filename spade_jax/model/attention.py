"""Qwen3 grouped-query attention with per-head q/k RMSNorm, RoPE and an optional KV cache."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model.config import ModelConfig
from spade_jax.model.kv_cache import KV_ENTRY_AXIS, Rows, read_window, write_entries
from spade_jax.model.layers import Einsum, RMSNorm, apply_rope
from spade_jax.model.train_attention import causal_attention

# Finite "minus infinity": a query with no visible key (a padding token) gets uniform weights
# instead of NaNs; its output is never used.
_MASKED = float(jnp.finfo(jnp.float32).min)

# Decode steps (one query per row) over at most this many cache entries (rows x length) use
# the multiply-reduce form of `_decode_attention`: on the 2-core dev CPU (bench-40m, fp32) it
# cut a 56-slot step from 159 to 118 ms at 576 entries a row, but doubled it at 1152 (the
# fused passes fall out of the CPU caches), where the batched dot is faster.
_ELEMENTWISE_MAX_ENTRIES = 56 * 576


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                          scale: float) -> jax.Array:
  """q [B, T, N, Hd]; k, v [B, S, K, Hd]; mask [B, T, S] bool (True = visible) -> [B, T, N, Hd].

  Query head n reads kv head n // (N // K), as Hugging Face's repeat_kv does. Scores and
  softmax run in fp32; the weighted sum runs in v's dtype. The plain full-square form: the
  reference the faster paths (train_attention.causal_attention, cached_attention) are
  tested against.
  """
  return _einsum_attention(q, k, v, mask, scale, "bskh")


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                     scale: float) -> jax.Array:
  """dot_product_attention over keys and values in the cache layout k, v [B, K, S, Hd]."""
  b, t, n, hd = q.shape
  kv_heads = k.shape[1]
  if t == 1 and b * k.shape[2] <= _ELEMENTWISE_MAX_ENTRIES:
    qg = q.reshape(b, kv_heads, n // kv_heads, hd)  # [B, K, G, Hd]
    return _decode_attention(qg, k, v, mask[:, 0], scale).reshape(b, t, n, hd)
  return _einsum_attention(q, k, v, mask, scale, "bksh")


def _einsum_attention(q, k, v, mask, scale, kv_spec: str):
  """The batched-dot form; kv_spec names the k / v axes ("bskh" or "bksh")."""
  b, t, n, hd = q.shape
  kv_heads = k.shape[kv_spec.index("k")]
  qg = q.reshape(b, t, kv_heads, n // kv_heads, hd)  # [B, T, K, G, Hd]
  scores = jnp.einsum(f"btkgh,{kv_spec}->bkgts", qg, k,
                      preferred_element_type=jnp.float32) * scale
  scores = jnp.where(mask[:, None, None], scores, _MASKED)  # [B, K, G, T, S]
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum(f"bkgts,{kv_spec}->btkgh", probs, v)  # [B, T, K, G, Hd]
  return out.reshape(b, t, n, hd)


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

  def __call__(
      self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
      kv: tuple[jax.Array, jax.Array] | None = None, write_at: jax.Array | None = None,
      rows: Rows = None, read_len: int | None = None,
  ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
    """x [B, T, D]; cos/sin [B, T, Hd]; mask [B, T, S].

    Without a cache S == T. With `kv` (this layer's whole cache k, v [S_all, L, K, Hd]) the
    new keys and values are first written at `write_at` [B] of the cache rows `rows` (see
    Qwen3.hidden), then attention reads those rows' first `read_len` entries (S of them).
    Returns the block output [B, T, D] and the updated (k, v) or None.
    """
    q = apply_rope(self.q_norm(self.q_proj(x)), cos, sin)  # [B, T, N, Hd]
    k = apply_rope(self.k_norm(self.k_proj(x)), cos, sin)  # [B, T, K, Hd]
    v = self.v_proj(x)  # [B, T, K, Hd]
    new_kv = None
    if kv is not None:
      new_kv = tuple(write_entries(c, n.swapaxes(1, 2), rows, write_at, KV_ENTRY_AXIS)
                     for c, n in zip(kv, (k, v), strict=True))
      k, v = (read_window(c, rows, read_len, KV_ENTRY_AXIS).astype(q.dtype)
              for c in new_kv)  # [B, K, S, Hd]
      out = cached_attention(q, k, v, mask, self.scale)
    else:  # the uncached mask is causal: blocked attention skips the keys after each block
      out = causal_attention(q, k, v, mask, self.scale)
    return self.o_proj(out), new_kv


def _decode_attention(qg: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                      scale: float) -> jax.Array:
  """One query per row: qg [B, K, G, Hd]; k, v [B, K, S, Hd]; mask [B, S] -> [B, K, G, Hd].

  Broadcast multiply + reduce instead of einsum: XLA's CPU backend fuses these into passes
  over each head's contiguous entries, where its batched dot with G (2-8) query rows per
  head is several times slower. Same maths as the einsum path (fp32 scores and softmax).
  """
  f32 = jnp.float32
  scores = jnp.sum(qg[:, :, :, None].astype(f32) * k[:, :, None].astype(f32),
                   axis=-1) * scale  # [B, K, G, S]
  scores = jnp.where(mask[:, None, None], scores, _MASKED)
  probs = jax.nn.softmax(scores, axis=-1)
  out = jnp.sum(probs[..., None] * v[:, :, None].astype(f32), axis=3)  # [B, K, G, Hd]
  return out.astype(v.dtype)
