"""Only policy-sampled tokens carry loss: masked tokens get exactly zero gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset
from spade_jax.rl.aggregation import token_weights
from spade_jax.rl.config import RLConfig
from spade_jax.rl.losses import grpo_token_loss, token_logprobs
from spade_jax.rl.step_inputs import loss_positions
from spade_jax.rl.train_step import _micro_loss

CFG = RLConfig(beta=0.1, kl_estimator="k3", logprob_chunk=5)


@pytest.fixture(scope="module")
def model():
  return Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0))


def _episode(seed):
  """Two rows of prompt / action / observation / action / trailing observation / pad."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, 1024, (2, 24)).astype(np.int32)
  attention = np.ones((2, 24), np.int32)
  attention[1, 20:] = 0
  loss = np.zeros((2, 24), np.float32)
  loss[:, 6:10] = 1  # first action
  loss[:, 13:16] = 1  # second action; 16.. is an observation (and padding in row 1)
  behaviour = np.where(loss > 0, -6.5 + rng.normal(0, 0.2, (2, 24)), 0).astype(np.float32)
  return tokens, attention, loss, behaviour


def test_chunked_logprobs_equal_full_log_softmax(model):
  tokens, attention, _, _ = _episode(0)
  logp, entropy = token_logprobs(model, jnp.asarray(tokens), jnp.asarray(attention), chunk=5,
                                 temperature=0.7)
  logits = np.asarray(model(jnp.asarray(tokens), attention_mask=jnp.asarray(attention)),
                      np.float64) / 0.7
  full = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = np.take_along_axis(full[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
  np.testing.assert_allclose(np.asarray(logp)[:, 1:], expected, rtol=1e-5, atol=1e-5)
  assert (np.asarray(logp)[:, 0] == 0).all()
  np.testing.assert_allclose(np.asarray(entropy)[:, 1:],
                             -(np.exp(full) * full).sum(-1)[:, :-1], rtol=1e-4)


def test_logprob_remat_changes_memory_not_values_or_gradients(model):
  tokens, attention, loss, _ = _episode(4)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def run(remat):
    def total(p):
      logp, entropy = token_logprobs(nnx.merge(graphdef, p, rest), jnp.asarray(tokens),
                                     jnp.asarray(attention), chunk=5, remat=remat)
      return jnp.sum(jnp.where(loss > 0, logp, 0.0)), (logp, entropy)
    return jax.jit(jax.grad(total, has_aux=True))(params)

  (g_remat, (lp_remat, ent_remat)), (g_kept, (lp_kept, ent_kept)) = run(True), run(False)
  np.testing.assert_allclose(lp_kept, lp_remat, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(ent_kept, ent_remat, rtol=1e-6, atol=1e-6)
  for a, b in zip(jax.tree.leaves(g_kept), jax.tree.leaves(g_remat), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_loss_positions_are_ascending_then_zero_in_at_most_eight_widths():
  mask = np.zeros((3, 512), np.float32)
  mask[0, 64:] = 1  # 448 loss tokens
  mask[1, [5, 9, 300]] = 1
  positions = loss_positions(mask, chunk=64)
  assert positions.shape == (3, 448) and positions.dtype == np.int32
  np.testing.assert_array_equal(positions[0], np.arange(64, 512))
  np.testing.assert_array_equal(positions[1, :4], [5, 9, 300, 0])
  assert not positions[1, 3:].any() and not positions[2].any()  # row 2 has no loss
  # Widths are multiples of max(chunk, T / 8), capped at T.
  assert loss_positions(mask[1:], chunk=64).shape == (2, 64)
  assert loss_positions(np.ones((1, 2048)), chunk=64).shape == (1, 2048)
  assert loss_positions(np.eye(1, 2048, 7), chunk=64).shape == (1, 256)
  assert loss_positions(np.zeros((2, 16)), chunk=64).shape == (2, 16)


def test_logprobs_at_loss_positions_equal_the_full_pass_values_and_gradients(model):
  tokens, attention, loss, _ = _episode(5)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  positions = jnp.asarray(loss_positions(loss, chunk=5))
  weights = jnp.asarray(np.random.default_rng(6).normal(size=loss.shape), jnp.float32)

  def run(pos):
    def total(p):
      logp, entropy = token_logprobs(nnx.merge(graphdef, p, rest), jnp.asarray(tokens),
                                     jnp.asarray(attention), chunk=5, positions=pos)
      return jnp.sum(jnp.where(loss > 0, weights * logp, 0.0)), (logp, entropy)
    return jax.jit(jax.grad(total, has_aux=True))(params)

  (g_all, (lp_all, ent_all)), (g_pos, (lp_pos, ent_pos)) = run(None), run(positions)
  on = loss > 0
  np.testing.assert_allclose(np.asarray(lp_pos)[on], np.asarray(lp_all)[on], rtol=1e-6,
                             atol=1e-6)
  np.testing.assert_allclose(np.asarray(ent_pos)[on], np.asarray(ent_all)[on], rtol=1e-6)
  assert not np.asarray(lp_pos)[~on].any() and not np.asarray(ent_pos)[~on].any()
  for a, b in zip(jax.tree.leaves(g_all), jax.tree.leaves(g_pos), strict=True):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_loss_gradient_is_exactly_zero_off_the_mask():
  rng = np.random.default_rng(1)
  logp = jnp.asarray(np.log(rng.uniform(0.05, 1, (3, 8))), jnp.float32)
  ref = logp + 0.3
  mask = jnp.asarray(rng.random((3, 8)) < 0.5, jnp.float32)
  # Garbage behaviour log-probs off the mask must not leak (no NaN through the ratio).
  behaviour = jnp.where(mask > 0, logp - 0.1, jnp.nan)
  weights = jnp.asarray(token_weights(np.asarray(mask), "token_mean"))

  def loss(lp, rp):
    per_token, _ = grpo_token_loss(lp, behaviour, rp, jnp.array([1.0, -1.0, 0.5]), mask, CFG)
    return jnp.sum(weights * per_token)

  g_policy, g_ref = jax.grad(loss, argnums=(0, 1))(logp, ref)
  for g in (np.asarray(g_policy), np.asarray(g_ref)):
    assert (g[np.asarray(mask) == 0] == 0).all()
    assert np.isfinite(g).all()
  assert (np.asarray(g_policy)[np.asarray(mask) > 0] != 0).all()


def test_param_gradients_ignore_observations_and_masked_fields(model):
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  @jax.jit
  def grads(batch):
    ref_logp, _ = token_logprobs(nnx.merge(graphdef, params, rest), batch["tokens"],
                                 batch["attention_mask"], chunk=5)
    return jax.grad(lambda p: _micro_loss(p, ref_logp, rest, batch, graphdef=graphdef,
                                          cfg=CFG)[0])(params)

  tokens, attention, loss, behaviour = _episode(2)
  batch = dict(tokens=tokens, attention_mask=attention, loss_mask=loss,
               behaviour_logprobs=behaviour, advantages=np.array([1.0, -0.5], np.float32),
               weights=token_weights(loss, "seq_mean_token_mean"))
  base = grads(batch)
  # Change what follows the last action (an environment observation and the padding) and
  # the behaviour log-probs wherever loss_mask is 0: the gradient must not move at all.
  other = dict(batch)
  other["tokens"] = tokens.copy()
  other["tokens"][:, 16:] = np.random.default_rng(3).integers(1, 1024, (2, 8))
  other["behaviour_logprobs"] = np.where(loss > 0, behaviour, -123.0).astype(np.float32)
  changed = grads(other)
  for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(changed), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # ... while changing a sampled token does move it (the test can fail).
  moved = dict(batch)
  moved["tokens"] = tokens.copy()
  moved["tokens"][:, 14] = (tokens[:, 14] + 1) % 1024
  moved_grads = grads(moved)
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(moved_grads),
                                 strict=True))
