"""The projection matmul's forward and custom backward against float64 NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spade_jax.model.matmul import matmul

BF16 = jnp.bfloat16


def _operands(m: int, k: int, n: int, transpose_w: bool):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((m, k)).astype(np.float32)
  w = rng.standard_normal((n, k) if transpose_w else (k, n)).astype(np.float32)
  g = rng.standard_normal((m, n)).astype(np.float32)
  return x, w, g


def _rounded(a: np.ndarray, dtype) -> np.ndarray:
  """a rounded to `dtype`, as float64 (what the kernels read)."""
  return np.asarray(jnp.asarray(a).astype(dtype).astype(jnp.float32), np.float64)


def _vjp(x, w, g, compute_dtype, out_dtype, transpose_w):
  y, pull = jax.vjp(lambda x, w: matmul(x, w, compute_dtype=compute_dtype, out_dtype=out_dtype,
                                        transpose_w=transpose_w), x, w)
  return (y, *pull(g))


@pytest.mark.parametrize("transpose_w", [False, True])
@pytest.mark.parametrize("compute_dtype", [jnp.float32, BF16])
@pytest.mark.parametrize("m", [64, 33])  # an odd M takes the plain-transpose path
def test_forward_and_gradients_match_float64(transpose_w, compute_dtype, m):
  x, w, g = _operands(m, 48, 40, transpose_w)
  y, dx, dw = _vjp(jnp.asarray(x), jnp.asarray(w), jnp.asarray(g), compute_dtype, jnp.float32,
                   transpose_w)
  # The kernels read operands and the cotangent rounded to compute_dtype and accumulate in
  # fp32: the only error left against float64 is fp32 accumulation.
  xr, wr, gr = (_rounded(a, compute_dtype) for a in (x, w, g))
  w_kn = wr.T if transpose_w else wr
  np.testing.assert_allclose(y, xr @ w_kn, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, gr @ w_kn.T, rtol=1e-5, atol=1e-5)
  dw_ref = gr.T @ xr if transpose_w else xr.T @ gr
  np.testing.assert_allclose(dw, dw_ref, rtol=1e-5, atol=1e-5)
  assert (y.dtype, dx.dtype, dw.dtype) == (jnp.float32,) * 3  # fp32 in, fp32 gradients out


def test_output_and_input_gradient_dtypes_follow_the_arguments():
  x, w, g = _operands(16, 8, 12, False)
  y, dx, dw = _vjp(jnp.asarray(x, BF16), jnp.asarray(w), jnp.asarray(g, BF16), BF16, None,
                   False)
  assert (y.dtype, dx.dtype, dw.dtype) == (BF16, BF16, jnp.float32)


def test_sharded_gradients_equal_unsharded():
  """The row-major transpose splits M; a sharded M must give the same gradients."""
  x, w, g = (jnp.asarray(a) for a in _operands(64, 32, 24, False))
  expected = _vjp(x, w, g, BF16, jnp.float32, False)
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(8), ("fsdp",))
  rows = NamedSharding(mesh, PartitionSpec("fsdp", None))
  with jax.set_mesh(mesh):
    got = jax.jit(_vjp, static_argnums=(3, 4, 5))(
        jax.device_put(x, rows), w, jax.device_put(g, rows), BF16, jnp.float32, False)
  for a, b in zip(got, expected, strict=True):  # equal up to fp32 accumulation order
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
