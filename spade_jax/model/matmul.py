"""The projection matmul with fp32 accumulation and a backward of three fast matmuls.

`matmul(x, w, ...)` is `x [M, K] @ w [K, N]` (or `w [N, K]` with `transpose_w`) that casts
both operands to `compute_dtype`, accumulates in fp32 and returns `out_dtype`. Its custom
backward keeps the same contract for the two gradient matmuls:
- the output cotangent is cast to `compute_dtype` once, so with bf16 compute all three
  matmuls read bf16 and accumulate in fp32 (what a TPU MXU does). On XLA's CPU backend
  that keeps them on the fast bf16 dot kernels; JAX's own transpose rule would take the
  fp32 cotangent and upcast the bf16 operand, which runs on the much slower fp32 fallback;
- the weight gradient is returned in the parameter's dtype straight from the fp32
  accumulator (fp32 master weights get an unrounded gradient);
- on the CPU backend, with bf16 compute, the weight gradient's left operand is transposed
  into row-major memory first. XLA's CPU dot library takes only a row-major left operand
  whose contracted axis is last; `x^T @ g` as a plain dot contracts axis 0 and falls back
  to Eigen in fp32. The explicit transpose costs one pass over [M, K]. In fp32 the Eigen
  fallback is as fast as the library, so there the transpose would only cost time and fp32
  keeps the plain dot.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from spade_jax.model.platform import current_platform


def matmul(x: jax.Array, w: jax.Array, *, compute_dtype: jnp.dtype,
           out_dtype: jnp.dtype | None = None, transpose_w: bool = False) -> jax.Array:
  """x [M, K] @ w [K, N] (w [N, K] if `transpose_w`) -> [M, N] in `out_dtype`.

  `out_dtype` None means `compute_dtype`. The product is accumulated in fp32 either way.
  """
  out = jnp.dtype(compute_dtype if out_dtype is None else out_dtype)
  return _matmul(x, w, jnp.dtype(compute_dtype), out, transpose_w)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _matmul(x, w, compute_dtype, out_dtype, transpose_w):
  return _forward(x, w, compute_dtype, out_dtype, transpose_w)[0]


def _dot(a: jax.Array, b: jax.Array, *, transpose_b: bool = False) -> jax.Array:
  """a [M, K] @ b [K, N] (b [N, K] if transpose_b) accumulated and returned in fp32."""
  contract = 1 if transpose_b else 0
  return jax.lax.dot_general(a, b, (((1,), (contract,)), ((), ())),
                             preferred_element_type=jnp.float32)


def _row_major_transpose(a: jax.Array) -> jax.Array:
  """a.T [K, M] that XLA stores row-major instead of as a free column-major view.

  A plain transpose becomes a layout change that the dot then reads as a transposed
  operand. Splitting M first makes the result a new array in the default layout; the split
  keeps M's leading factor whole, so a sharded M stays sharded.
  """
  m, k = a.shape
  if current_platform() != "cpu" or a.dtype == jnp.float32 or m % 2:
    return a.T
  return jnp.transpose(a.reshape(m // 2, 2, k), (2, 0, 1)).reshape(k, m)


def _forward(x, w, compute_dtype, out_dtype, transpose_w):
  y = _dot(x.astype(compute_dtype), w.astype(compute_dtype), transpose_b=transpose_w)
  return y.astype(out_dtype), (x, w)


def _backward(compute_dtype, out_dtype, transpose_w, residuals, g):
  del out_dtype
  x, w = residuals
  xc, wc, gc = x.astype(compute_dtype), w.astype(compute_dtype), g.astype(compute_dtype)
  dx = _dot(gc, wc, transpose_b=not transpose_w)  # [M, K]
  if transpose_w:
    dw = _dot(_row_major_transpose(gc), xc)  # [N, K]
  else:
    dw = _dot(_row_major_transpose(xc), gc)  # [K, N]
  return dx.astype(x.dtype), dw.astype(w.dtype)


_matmul.defvjp(_forward, _backward)
