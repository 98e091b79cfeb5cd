"""Causal attention for the uncached pass (training and scoring), with a hand-written backward.

Same maths as `attention.dot_product_attention` (fp32 scores and softmax, the weighted sum
in v's dtype), organised for XLA's CPU backend, where the plain einsum form spends most of
its time in element-wise passes and transposes of the [B, N, T, T] score arrays:
- queries run in blocks of `block` rows, and block i reads only keys [0, end of block i):
  the mask of an uncached pass is causal, so the skipped scores are masked anyway, and a
  causal pass does about half the work of the full square;
- q, k and v are put head-major ([B, K, G, T, Hd]) once, so every matmul reads the large
  probability array in its stored layout;
- the backward (`_causal_bwd`) keeps the softmax probabilities and uses the identity
  sum_s p * dp = sum_h dout * out, so the backward makes one element-wise pass over them;
- the mask enters as an additive bias built at [B, 1, G*C, S], not as a `where` against
  a scalar, and the 1/sqrt(Hd) scale multiplies q (and dq), not the scores: XLA's CPU dot
  library fuses element-wise work into the score matmul, but materialises every scalar
  operand as a broadcast at the full [B, K, G*C, S] score shape first;
- the key and value gradients are formed as [B, K, Hd, S] (`q^T @ ds`, `do^T @ p`) and
  transposed once at the end: contracting the query axis of `ds` or `p` directly makes
  their left operand column-major, which the library does not take.
The figures behind each choice are in bench/RESULTS_LOG.md.

A query with no visible key (a padding token) gets uniform weights over the keys up to the
end of its block instead of over all keys; its output is never used (see attention.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

# Added to masked scores. Any real score is lost in its rounding, so a fully masked row
# is uniform and finite (finfo.min would overflow to -inf when a negative score is added).
_MASK_BIAS = -1e30

DEFAULT_BLOCK = 64
# Blocks are unrolled in the traced program, and the key gradients sum over block pairs, so
# compile time grows with their number; capping it keeps long rows (designer rows reach 8k
# tokens) quick to compile without slowing the warm step.
MAX_BLOCKS = 32


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float,
                     *, block: int = DEFAULT_BLOCK) -> jax.Array:
  """q [B, T, N, Hd]; k, v [B, T, K, Hd]; mask [B, T, T] bool -> [B, T, N, Hd].

  `mask[b, t, s]` (True = visible) must be False for every s > t, as the uncached mask of
  `Qwen3.hidden` is; keys after a query's block are never read. Query head n reads kv
  head n // (N // K). Past MAX_BLOCKS * block rows the blocks grow, in multiples of
  `block`, so that there are at most MAX_BLOCKS.
  """
  b, t, n, hd = q.shape
  block = -(-max(block, -(-t // MAX_BLOCKS)) // block) * block
  kv_heads = k.shape[2]
  if k.shape[1] != t or mask.shape != (b, t, t):
    raise ValueError(f"causal_attention needs self-attention shapes: q {q.shape}, k {k.shape}, "
                     f"mask {mask.shape} (expected [B, T, T] with T = {t})")
  qh = q.reshape(b, t, kv_heads, n // kv_heads, hd).transpose(0, 2, 3, 1, 4)  # [B, K, G, T, Hd]
  kh = k.transpose(0, 2, 1, 3)  # [B, K, T, Hd]
  vh = v.transpose(0, 2, 1, 3)  # [B, K, T, Hd]
  out = _causal(qh, kh, vh, mask, scale, block)  # [B, K, G, T, Hd]
  return out.transpose(0, 3, 1, 2, 4).reshape(b, t, n, hd)


def _blocks(t: int, block: int) -> list[tuple[int, int]]:
  return [(start, min(start + block, t)) for start in range(0, t, block)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _causal(q, k, v, mask, scale: float, block: int):
  """q [B, K, G, T, Hd]; k, v [B, K, T, Hd]; mask [B, T, T] -> [B, K, G, T, Hd]."""
  return _causal_fwd(q, k, v, mask, scale, block)[0]


def _causal_fwd(q, k, v, mask, scale, block):
  b, kv_heads, g, t, hd = q.shape
  q = q * scale  # scaled here, not the [B, K, G*C, S] scores (see the module docstring)
  outs, probs = [], []
  for start, end in _blocks(t, block):
    c = end - start
    qf = q[:, :, :, start:end].reshape(b, kv_heads, g * c, hd)  # [B, K, G*C, Hd]
    scores = jnp.einsum("bkqh,bksh->bkqs", qf, k[:, :, :end],
                        preferred_element_type=jnp.float32)  # [B, K, G*C, S]
    bias = jnp.where(mask[:, None, None, start:end, :end], 0.0, _MASK_BIAS)  # [B, 1, 1, C, S]
    bias = jnp.broadcast_to(bias, (b, 1, g, c, end)).reshape(b, 1, g * c, end)
    scores = scores + bias  # broadcast over K
    p = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    outs.append(jnp.einsum("bkqs,bksh->bkqh", p, v[:, :, :end]).reshape(b, kv_heads, g, c, hd))
    probs.append(p)
  out = jnp.concatenate(outs, axis=3)  # [B, K, G, T, Hd]
  return out, (q, k, v, tuple(probs), out)


def _causal_bwd(scale, block, residuals, dout):
  q, k, v, probs, out = residuals  # q is the scaled q
  b, kv_heads, g, t, hd = q.shape
  blocks = _blocks(t, block)
  dqs, dks, dvs = [], [], []
  for (start, end), p in zip(blocks, probs, strict=True):
    c = end - start
    qf = q[:, :, :, start:end].reshape(b, kv_heads, g * c, hd)
    do = dout[:, :, :, start:end].reshape(b, kv_heads, g * c, hd)  # [B, K, G*C, Hd]
    o = out[:, :, :, start:end].reshape(b, kv_heads, g * c, hd)
    dvs.append(jnp.einsum("bkhq,bkqs->bkhs", jnp.swapaxes(do, 2, 3), p))  # [B, K, Hd, S]
    dp = jnp.einsum("bkqh,bksh->bkqs", do, v[:, :, :end], preferred_element_type=jnp.float32)
    # softmax backward: p * (dp - sum_s p dp), with sum_s p dp = sum_h dout * out.
    row = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
    ds = (p.astype(jnp.float32) * (dp - row)).astype(q.dtype)  # d scores
    dqs.append(jnp.einsum("bkqs,bksh->bkqh", ds, k[:, :, :end]).reshape(b, kv_heads, g, c, hd))
    dks.append(jnp.einsum("bkhq,bkqs->bkhs", jnp.swapaxes(qf, 2, 3), ds))  # [B, K, Hd, S]

  def keys_grad(parts):  # key block j gets the sum over the query blocks i >= j
    summed = jnp.concatenate([sum(part[..., start:end] for part in parts[j:])
                              for j, (start, end) in enumerate(blocks)], axis=3)
    return jnp.swapaxes(summed, 2, 3)  # [B, K, T, Hd]

  return jnp.concatenate(dqs, axis=3) * scale, keys_grad(dks), keys_grad(dvs), None


_causal.defvjp(_causal_fwd, _causal_bwd)
