"""RMSNorm's scale gradient: summed in fp32 over every token, whatever the compute dtype."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model.layers import RMSNorm, scale_multiply

BF16 = jnp.bfloat16


def _as64(a) -> np.ndarray:
  return np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64)


@pytest.mark.parametrize("dtype", [jnp.float32, BF16])
def test_scale_multiply_gradients_match_float64(dtype):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((8, 512, 4, 16)), dtype)  # 16384 terms per scale entry
  g = jnp.asarray(rng.standard_normal(x.shape), dtype)
  scale = jnp.asarray(1 + 0.1 * rng.standard_normal(16), jnp.float32)
  y, pull = jax.vjp(scale_multiply, scale, x)
  d_scale, dx = pull(g)
  assert (y.dtype, d_scale.dtype, dx.dtype) == (dtype, jnp.float32, dtype)
  expected = (_as64(g) * _as64(x)).reshape(-1, 16).sum(0)
  # fp32 accumulation of exact products: only rounding of the fp32 running sum remains.
  np.testing.assert_allclose(d_scale, expected, rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(np.asarray(dx),
                                np.asarray(g * scale.astype(dtype).reshape(1, 1, 1, 16)))


def test_bf16_rmsnorm_scale_gradient_is_accurate():
  """What autodiff got wrong: its bf16 sum over 4096 tokens with cancelling terms."""
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal((8, 512, 64)), BF16)
  g = jnp.asarray(rng.standard_normal(x.shape), BF16)
  norm = RMSNorm(64, 1e-6, "norm", param_dtype=jnp.float32)
  graphdef, state = nnx.split(norm)
  _, pull = jax.vjp(lambda s: nnx.merge(graphdef, s)(x), state)
  (d_scale,) = jax.tree.leaves(pull(g)[0])
  x64 = _as64(x)
  normed = _as64(jnp.asarray(x64 / np.sqrt(np.mean(x64 ** 2, -1, keepdims=True) + 1e-6),
                             jnp.float32).astype(BF16))  # rounded to bf16 as the model does
  expected = (_as64(g) * normed).reshape(-1, 64).sum(0)
  np.testing.assert_allclose(d_scale, expected, rtol=1e-3, atol=1e-2)
