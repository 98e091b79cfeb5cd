"""top-k / top-p sampling: support and frequencies of the renormalised distribution."""

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.engine import sampling

N = 20_000
# Max |empirical - exact| frequency. The std of a frequency is sqrt(p(1-p)/N) <= 0.0036 at
# N = 20k, so 0.015 is > 4 sigma for each of the 16 tokens: a wrong renormalisation (e.g.
# top-p mass not renormalised, or off-by-one in the kept set) moves some frequency by > 0.03.
FREQ_TOL = 0.015
LOGITS = np.log(np.array([0.30, 0.20, 0.15, 0.10, 0.08, 0.06, 0.04, 0.03,
                          0.01, 0.01, 0.005, 0.005, 0.004, 0.003, 0.002, 0.001]))


def _exact(temperature, top_p, top_k):
  """Reference renormalised distribution, straight from the definition in sampling.py."""
  z = LOGITS / temperature
  order = np.argsort(-z)
  k = top_k or len(z)
  kept = order[:k]
  p = np.exp(z[kept] - z[kept].max())
  p /= p.sum()
  before = np.cumsum(p) - p
  kept = kept[before < top_p]
  out = np.zeros_like(z)
  out[kept] = np.exp(z[kept] - z[kept].max())
  return out / out.sum()


@jax.jit
def _draw(logits, temperature, top_p, top_k):
  """N draws for one request, keys from (seed 7, positions 0..N-1). logits are an argument:
  as a constant XLA would spend seconds constant-folding the sort."""
  logits = jnp.broadcast_to(logits, (N, len(LOGITS)))
  keys = sampling.token_keys(jnp.full((N,), 7), jnp.arange(N))
  full = lambda x: jnp.full((N,), x)
  return sampling.sample(logits, keys, full(temperature), full(top_p), full(top_k))


def test_topk_topp_frequencies_support_and_logprobs():
  for temperature, top_p, top_k in [(1.0, 0.7, 0), (0.8, 1.0, 4), (1.5, 0.9, 6), (1.0, 1.0, 0)]:
    exact = _exact(temperature, top_p, top_k)
    tokens, logprobs = jax.device_get(_draw(LOGITS.astype(np.float32), temperature, top_p,
                                                np.int32(top_k)))
    assert set(tokens) <= set(np.flatnonzero(exact)), (temperature, top_p, top_k)
    freq = np.bincount(tokens, minlength=len(LOGITS)) / N
    np.testing.assert_allclose(freq, exact, atol=FREQ_TOL, rtol=0)
    np.testing.assert_allclose(logprobs, np.log(exact[tokens]), atol=1e-5, rtol=0)


@jax.jit
def _mixed_batch(logits):
  temperature = jnp.array([0.0, 1.0, 1.0])
  top_p = jnp.array([0.5, 0.9, 0.9])
  top_k = jnp.array([3, 10, 10])
  keys = sampling.token_keys(jnp.array([1, 2, 2]), jnp.array([5, 9, 9]))
  batch = sampling.sample(logits, keys, temperature, top_p, top_k)
  alone = sampling.sample(logits[1:2], keys[1:2], temperature[1:2], top_p[1:2], top_k[1:2])
  return batch, alone


def test_greedy_rows_ignore_filters_and_draws_depend_only_on_seed_and_position():
  row = np.random.RandomState(0).randn(50)
  logits = jnp.asarray(np.stack([row, row, row]), jnp.float32)
  (tokens, logprobs), (alone, _) = jax.device_get(_mixed_batch(logits))
  assert tokens[0] == np.argmax(row)
  np.testing.assert_allclose(logprobs[0], jax.nn.log_softmax(row)[tokens[0]], atol=1e-5)
  # Rows 1 and 2 share (seed, position) and logits: same draw, also when sampled alone.
  assert tokens[1] == tokens[2] == alone[0]


def test_two_level_draw_is_the_inverse_cdf_of_the_kept_weights():
  """Tokens equal a float64 inverse CDF over the whole vocabulary for the same uniforms,
  with zero-weight entries never drawn; vocab 1000 is not a multiple of the block size."""
  rows, vocab = 512, 1000
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(rows, vocab)).astype(np.float32) * 3
  logits[rng.random((rows, vocab)) < 0.3] = -np.inf  # weight 0
  keys = sampling.token_keys(jnp.arange(rows), jnp.full((rows,), 5))
  ones = jnp.ones((rows,))
  tokens, logprobs = jax.jit(sampling.sample)(logits, keys, ones, ones,
                                              jnp.zeros((rows,), jnp.int32))
  u = np.asarray(jax.vmap(jax.random.uniform)(keys), np.float64)
  weights = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
  cdf = np.cumsum(weights, axis=1)
  expected = [np.searchsorted(c, x * c[-1], side="right") for c, x in zip(cdf, u, strict=True)]
  np.testing.assert_array_equal(np.asarray(tokens), expected)
  assert np.all(np.isfinite(logits[np.arange(rows), np.asarray(tokens)]))
  picked = weights[np.arange(rows), expected] / cdf[:, -1]
  np.testing.assert_allclose(logprobs, np.log(picked), atol=1e-5)
