"""Basic Qwen3 building blocks: projections, RMSNorm, token embedding and rotary embeddings.

Every parameter is an `nnx.Param` carrying `logical_axes` metadata (one name per dimension);
`sharding.py` maps those names to mesh axes. Parameters live in `param_dtype`; each block
casts them to `compute_dtype` at the point of use, so fp32 master weights can run bf16 math.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model.matmul import matmul

# Hugging Face's Qwen3 `initializer_range`: every projection starts as N(0, 0.02^2).
INIT_STD = 0.02


def normal_param(rngs: nnx.Rngs, shape: Sequence[int], axes: Sequence[str | None],
                 dtype: jnp.dtype, std: float = INIT_STD) -> nnx.Param:
  """A normally initialised parameter annotated with its logical axis names."""
  if len(shape) != len(axes):
    raise ValueError(f"shape {tuple(shape)} and logical axes {tuple(axes)} differ in rank")
  value = std * jax.random.normal(rngs.params(), tuple(shape), jnp.float32)
  return nnx.Param(value.astype(dtype), logical_axes=tuple(axes))


class Einsum(nnx.Module):
  """A bias-free projection `einsum(spec, x, kernel)` with a kernel of any rank.

  Multi-dimensional kernels (e.g. [D, N, Hd] for the query projection) keep heads as their
  own axis so heads shard over the `tensor` mesh axis. A projection of [B, T, ...] activations
  whose kernel starts with the contracted axes ("btnh,nhd->btd") runs as one 2-D matmul,
  [B*T, contracted] x [contracted, rest] (`matmul.matmul`, fp32 accumulation and a backward
  that keeps bf16 compute in bf16). XLA's CPU backend then compiles the matmul's
  gradients without transposing the activations, and does not copy the output projection's
  kernel into another layout at every decode step.
  """

  def __init__(self, spec: str, shape: Sequence[int], axes: Sequence[str | None], *,
               param_dtype: jnp.dtype, compute_dtype: jnp.dtype, rngs: nnx.Rngs,
               out_dtype: jnp.dtype | None = None):
    self.spec = spec
    lhs, rhs, out = spec.replace("->", ",").split(",")
    contracted = lhs[2:]
    self.matmul = (lhs[:2] == out[:2] == "bt" and rhs.startswith(contracted)
                   and out[2:] == rhs[len(contracted):])
    self.contracted_axes = len(contracted)
    self.compute_dtype = compute_dtype
    self.out_dtype = out_dtype  # e.g. fp32 logits from bf16 inputs (fp32 accumulation)
    self.kernel = normal_param(rngs, shape, axes, param_dtype)
    self.lora = nnx.data(None)  # a model/lora.py adapter, when LoRA targets this projection

  def __call__(self, x: jax.Array, kernel: jax.Array | None = None) -> jax.Array:
    """x [B, T, ...] -> the projection; `kernel` replaces the parameter's value (a resharded
    copy of it, e.g. the loss's vocabulary-parallel head)."""
    kernel = self.kernel[...] if kernel is None else kernel
    if not self.matmul:
      return jnp.einsum(self.spec, x.astype(self.compute_dtype),
                        kernel.astype(self.compute_dtype), preferred_element_type=self.out_dtype)
    c = self.contracted_axes
    y = matmul(x.reshape(x.shape[0] * x.shape[1], -1),
               kernel.reshape(math.prod(kernel.shape[:c]), -1),
               compute_dtype=self.compute_dtype, out_dtype=self.out_dtype)  # [B*T, rest]
    if self.lora is not None:
      y = y + self.lora(x.reshape(x.shape[0] * x.shape[1], -1), y.dtype)
    return y.reshape(*x.shape[:2], *kernel.shape[c:])


class RMSNorm(nnx.Module):
  """Hugging Face Qwen3RMSNorm: normalise in fp32, cast back, then multiply by the scale."""

  def __init__(self, dim: int, eps: float, axis_name: str, *, param_dtype: jnp.dtype):
    self.eps = eps
    self.scale = nnx.Param(jnp.ones((dim,), param_dtype), logical_axes=(axis_name,))

  def __call__(self, x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    normed = (x32 * jax.lax.rsqrt(var + self.eps)).astype(x.dtype)
    return scale_multiply(self.scale[...], normed)


@jax.custom_vjp
def scale_multiply(scale: jax.Array, x: jax.Array) -> jax.Array:
  """scale [D] cast to x's dtype, times x [..., D]; the scale's gradient is summed in fp32.

  Autodiff would sum the scale's gradient over every token in x's dtype: with bf16 compute
  that is a bf16 sum over B*T (times heads for the q/k norms) terms, which loses most
  entries when the terms cancel (tests/model/test_layers.py keeps such a case). Here the
  products are summed in fp32 (also faster on CPU).
  """
  return _lead(scale.astype(x.dtype), x.ndim) * x


def _lead(scale: jax.Array, ndim: int) -> jax.Array:
  """scale [D] as [1, ..., 1, D] of rank `ndim`: an explicit broadcast against [..., D]."""
  return scale.reshape((1,) * (ndim - 1) + scale.shape)


def _scale_multiply_fwd(scale, x):
  return scale_multiply(scale, x), (scale, x)


def _scale_multiply_bwd(residuals, g):
  scale, x = residuals
  products = g.astype(jnp.float32) * x.astype(jnp.float32)  # [..., D]
  # Summed over the leading axes in place (no reshape), so sharded axes reduce locally first.
  d_scale = jnp.sum(products, axis=tuple(range(x.ndim - 1)))
  return d_scale.astype(scale.dtype), g * _lead(scale.astype(g.dtype), g.ndim)


scale_multiply.defvjp(_scale_multiply_fwd, _scale_multiply_bwd)


class Embed(nnx.Module):
  """Token embedding [V, D]; `attend` is the tied LM head (logits in fp32)."""

  def __init__(self, vocab_size: int, dim: int, *, param_dtype: jnp.dtype,
               compute_dtype: jnp.dtype, rngs: nnx.Rngs):
    self.compute_dtype = compute_dtype
    self.embedding = normal_param(rngs, (vocab_size, dim), ("vocab", "embed"), param_dtype)

  def __call__(self, ids: jax.Array) -> jax.Array:
    return jnp.take(self.embedding[...], ids, axis=0).astype(self.compute_dtype)  # [B, T, D]

  def attend(self, h: jax.Array, embedding: jax.Array | None = None) -> jax.Array:
    """h [B, T, D] -> logits [B, T, V] in fp32; `embedding` replaces the table (see Einsum)."""
    b, t, d = h.shape
    embedding = self.embedding[...] if embedding is None else embedding
    logits = matmul(h.reshape(b * t, d), embedding, compute_dtype=self.compute_dtype,
                    out_dtype=jnp.float32, transpose_w=True)  # [B*T, V]
    return logits.reshape(b, t, -1)


def rope_frequencies(head_dim: int, theta: float) -> jax.Array:
  """RoPE's angular frequencies [Hd/2] in fp32, highest first (radians a position)."""
  return 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))


def rope_cos_sin(positions: jax.Array, head_dim: int,
                 theta: float) -> tuple[jax.Array, jax.Array]:
  """cos/sin tables [B, T, Hd] in fp32, laid out like Hugging Face (frequencies repeated twice)."""
  inv_freq = rope_frequencies(head_dim, theta)
  freqs = positions.astype(jnp.float32)[..., None] * inv_freq[None, None, :]  # [B, T, Hd/2]
  emb = jnp.concatenate([freqs, freqs], axis=-1)  # [B, T, Hd]
  return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotates x [B, T, H, Hd] with HF's rotate_half layout (halves, not interleaved pairs)."""
  cos = cos[:, :, None, :].astype(x.dtype)
  sin = sin[:, :, None, :].astype(x.dtype)
  x1, x2 = jnp.split(x, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return x * cos + rotated * sin
