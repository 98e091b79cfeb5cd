"""Advantages, KL estimators, clipping and aggregation against NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.rl.advantages import compute_advantages
from spade_jax.rl.aggregation import token_weights
from spade_jax.rl.batch import AGENT, DESIGNER
from spade_jax.rl.config import RLConfig
from spade_jax.rl.kl import KL_ESTIMATORS
from spade_jax.rl.losses import grpo_token_loss


def _np_group_adv(r, bessel, eps):
  if len(r) == 1 or (bessel and len(r) < 2):
    return np.zeros_like(r)
  mean = sum(r) / len(r)
  var = sum((x - mean) ** 2 for x in r) / (len(r) - (1 if bessel else 0))
  return np.array([(x - mean) / (var ** 0.5 + eps) for x in r])


@pytest.mark.parametrize("bessel", [False, True])
def test_grpo_advantages_per_role_and_group(bessel):
  rng = np.random.default_rng(0)
  rewards = rng.random(14).astype(np.float32)
  group_ids = np.array([0, 0, 0, 0, 1, 1, 1, 2, 0, 0, 0, 5, 5, 7])
  roles = np.array([AGENT] * 8 + [DESIGNER] * 6)  # group id 0 exists in both roles
  adv, stats = compute_advantages(rewards, group_ids, roles, bessel=bessel, eps=1e-4,
                                  role_weights={AGENT: 1.0, DESIGNER: 0.5})
  expected = np.zeros(14)
  for role, weight in ((AGENT, 1.0), (DESIGNER, 0.5)):
    for g in set(group_ids[roles == role]):
      rows = np.flatnonzero((roles == role) & (group_ids == g))
      expected[rows] = weight * _np_group_adv(rewards[rows].astype(np.float64), bessel, 1e-4)
  np.testing.assert_allclose(adv, expected, rtol=1e-6, atol=1e-6)
  assert adv[7] == 0 and adv[13] == 0  # singleton groups
  assert stats["agent/num_rows"] == 8 and stats["designer/num_rows"] == 6
  np.testing.assert_allclose(stats["designer/reward_mean"], rewards[8:].mean(), rtol=1e-6)


def test_rloo_and_dr_grpo_advantages():
  r = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
  g, roles = np.zeros(4, int), np.zeros(4, int)
  rloo, _ = compute_advantages(r, g, roles, estimator="rloo")
  np.testing.assert_allclose(rloo, [r[i] - np.delete(r, i).mean() for i in range(4)], atol=1e-7)
  dr, _ = compute_advantages(r, g, roles, estimator="dr_grpo")
  np.testing.assert_allclose(dr, r - r.mean(), atol=1e-7)


def test_advantages_reject_bad_rewards_and_roles():
  with pytest.raises(ValueError, match="non-finite.*rows \\[1\\]"):
    compute_advantages(np.array([0.0, np.nan]), np.zeros(2), np.zeros(2, int))
  with pytest.raises(ValueError, match="unknown role ids \\[3\\]"):
    compute_advantages(np.zeros(2), np.zeros(2), np.array([0, 3]))


def test_kl_estimators_match_numpy_and_k3_is_finite():
  rng = np.random.default_rng(1)
  logp = -rng.random(64) * 5
  ref = -rng.random(64) * 5
  x = ref - logp
  expected = {"k1": -x, "k2": 0.5 * x ** 2, "k3": np.exp(x) - x - 1}
  for name, fn in KL_ESTIMATORS.items():
    got = np.asarray(fn(jnp.asarray(logp, jnp.float32), jnp.asarray(ref, jnp.float32)))
    np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-6)
  # The reference far likelier than the policy: unclamped k3 is exp(99) = inf in bf16.
  far = KL_ESTIMATORS["k3"](jnp.array([-100.0], jnp.bfloat16), jnp.array([-1.0], jnp.bfloat16))
  assert np.isfinite(np.asarray(far)).all() and far.dtype == jnp.float32
  assert float(far[0]) == pytest.approx(np.exp(20.0) - 21.0, rel=1e-5)


def _np_clipped(logp, behaviour, adv, mask, clip_low, clip_high):
  out = np.zeros_like(logp)
  clipped = np.zeros_like(logp)
  for b in range(logp.shape[0]):
    for t in range(logp.shape[1]):
      if not mask[b, t]:
        continue
      ratio = np.exp(logp[b, t] - behaviour[b, t])
      a = -adv[b] * ratio
      c = -adv[b] * min(max(ratio, 1 - clip_low), 1 + clip_high)
      out[b, t] = max(a, c)
      clipped[b, t] = float(c > a)
  return out, clipped


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_clipped_loss_with_kl_matches_numpy(estimator):
  rng = np.random.default_rng(2)
  b, t = 4, 9
  logp = np.log(rng.uniform(0.05, 1, (b, t)))
  behaviour = np.log(np.clip(np.exp(logp) * rng.uniform(0.5, 1.6, (b, t)), 1e-3, 1))
  ref = logp + rng.normal(0, 0.3, (b, t))
  adv = np.array([1.5, -0.7, 0.0, -2.0])
  mask = rng.random((b, t)) < 0.7
  cfg = RLConfig(clip_low=0.2, clip_high=0.28, beta=0.1, kl_estimator=estimator)
  per_token, terms = grpo_token_loss(*(jnp.asarray(x, jnp.float32) for x in
                                       (logp, behaviour, ref, adv, mask)), cfg)
  pg, clipped = _np_clipped(logp, behaviour, adv, mask, 0.2, 0.28)
  x = ref - logp
  kl = {"k1": -x, "k3": np.exp(x) - x - 1}[estimator] * mask
  np.testing.assert_allclose(np.asarray(per_token), pg + 0.1 * kl, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(terms["clipped"]), clipped)
  assert 0 < clipped.sum() < mask.sum()  # the case mix exercises both branches


def _loss_inputs(seed=2, b=4, t=9):
  rng = np.random.default_rng(seed)
  logp = np.log(rng.uniform(0.05, 1, (b, t)))
  behaviour = np.log(np.clip(np.exp(logp) * rng.uniform(0.5, 1.6, (b, t)), 1e-3, 1))
  return logp, behaviour, np.array([1.5, -0.7, 0.0, -2.0]), rng.random((b, t)) < 0.7


def test_truncated_importance_sampling_weights_tokens_by_the_capped_ratio():
  """tis_cap > 0: loss_t = -A * min(pi_train / pi_rollout, cap) (the PPO ratio against the
  trainer's own log-probs is 1), and d loss_t / d logp_t = -A * that detached weight."""
  logp, behaviour, adv, mask = _loss_inputs()
  cfg = RLConfig(tis_cap=1.2)
  args = lambda lp: (lp, *(jnp.asarray(x, jnp.float32) for x in (behaviour, behaviour, adv,
                                                                  mask)))
  per_token, terms = grpo_token_loss(*args(jnp.asarray(logp, jnp.float32)), cfg)
  ratio = np.exp(logp - behaviour)
  weight = np.minimum(ratio, 1.2)
  np.testing.assert_allclose(np.asarray(per_token), -adv[:, None] * weight * mask, rtol=1e-5,
                             atol=1e-7)
  np.testing.assert_allclose(np.asarray(terms["ratio"]), ratio * mask, rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(terms["truncated"]), (ratio > 1.2) & mask)
  assert 0 < ((ratio > 1.2) & mask).sum() < mask.sum()
  grad = jax.grad(lambda lp: jnp.sum(grpo_token_loss(*args(lp), cfg)[0]))(
      jnp.asarray(logp, jnp.float32))
  np.testing.assert_allclose(np.asarray(grad), -adv[:, None] * weight * mask, rtol=1e-5,
                             atol=1e-7)


def test_tis_applies_to_the_rows_it_is_given_only():
  """tis_rows (the agent's): TIS there; other rows (the designer's, sampled k updates back)
  keep the plain clipped ratio against their behaviour log-probs, unweighted."""
  logp, behaviour, adv, mask = _loss_inputs()
  rows = np.array([True, False, True, False])
  cfg = RLConfig(tis_cap=1.2)
  args = lambda lp: (lp, *(jnp.asarray(x, jnp.float32) for x in (behaviour, behaviour, adv,
                                                                  mask)))
  per_token, terms = grpo_token_loss(*args(jnp.asarray(logp, jnp.float32)), cfg,
                                     tis_rows=jnp.asarray(rows))
  ratio = np.exp(logp - behaviour)
  tis = -adv[:, None] * np.minimum(ratio, 1.2) * mask
  plain, _ = _np_clipped(logp, behaviour, adv, mask, 0.2, 0.28)
  expected = np.where(rows[:, None], tis, plain)
  np.testing.assert_allclose(np.asarray(per_token), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(terms["truncated"]),
                                (ratio > 1.2) & mask & rows[:, None])
  assert not np.allclose(tis[~rows], plain[~rows])  # the two rules differ on these rows
  grad = jax.grad(lambda lp: jnp.sum(grpo_token_loss(*args(lp), cfg,
                                                     tis_rows=jnp.asarray(rows))[0]))(
      jnp.asarray(logp, jnp.float32))
  plain_grad = jax.grad(lambda lp: jnp.sum(grpo_token_loss(*args(lp), RLConfig())[0]))(
      jnp.asarray(logp, jnp.float32))
  np.testing.assert_allclose(np.asarray(grad)[~rows], np.asarray(plain_grad)[~rows], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(grad)[rows], tis[rows], rtol=1e-5, atol=1e-7)


def test_without_tis_the_ratio_is_reported_and_the_loss_unweighted():
  logp, behaviour, adv, mask = _loss_inputs()
  per_token, terms = grpo_token_loss(*(jnp.asarray(x, jnp.float32) for x in
                                       (logp, behaviour, behaviour, adv, mask)), RLConfig())
  pg, _ = _np_clipped(logp, behaviour, adv, mask, 0.2, 0.28)
  np.testing.assert_allclose(np.asarray(per_token), pg, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(terms["ratio"]), np.exp(logp - behaviour) * mask,
                             rtol=1e-5)
  assert not np.asarray(terms["truncated"]).any()


def _np_aggregate(per_token, mask, mode):
  if mode == "token_mean":
    return (per_token * mask).sum() / mask.sum()
  seqs = [b for b in range(mask.shape[0]) if mask[b].sum() > 0]
  if mode == "seq_mean_token_mean":
    return np.mean([(per_token[b] * mask[b]).sum() / mask[b].sum() for b in seqs])
  return np.mean([(per_token[b] * mask[b]).sum() / mask.shape[1] for b in seqs])


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean",
                                  "seq_mean_token_sum_norm"])
def test_aggregation_modes_match_numpy_and_split_exactly(mode):
  rng = np.random.default_rng(3)
  mask = (rng.random((6, 10)) < 0.5).astype(np.float32)
  mask[2] = 0  # a row without loss tokens is not a sequence of the mean
  per_token = rng.normal(size=(6, 10)).astype(np.float32)
  weights = token_weights(mask, mode)
  assert (weights[mask == 0] == 0).all()
  np.testing.assert_allclose((weights * per_token).sum(), _np_aggregate(per_token, mask, mode),
                             rtol=1e-5)
  # Weights of the full batch summed over two micro-batches give the full-batch loss.
  halves = (weights[:3] * per_token[:3]).sum() + (weights[3:] * per_token[3:]).sum()
  np.testing.assert_allclose(halves, (weights * per_token).sum(), rtol=1e-6)


def test_role_balance_sets_the_designer_share_whatever_its_token_count():
  rng = np.random.default_rng(4)
  roles = np.array([0, 0, 0, 1, 1])
  per_token = rng.normal(size=(5, 12)).astype(np.float32)
  for designer_tokens in (2, 12):  # few or many designer tokens: same share of the loss
    mask = np.zeros((5, 12), np.float32)
    mask[:3, :6] = 1
    mask[3:, :designer_tokens] = 1
    weights = token_weights(mask, "token_mean", roles, designer_share=0.2)
    assert (weights[mask == 0] == 0).all()
    np.testing.assert_allclose(weights[roles == 1].sum(), 0.2, rtol=1e-6)
    np.testing.assert_allclose(weights[roles == 0].sum(), 0.8, rtol=1e-6)
    agent, designer = (_np_aggregate(per_token[roles == r], mask[roles == r], "token_mean")
                       for r in (0, 1))
    np.testing.assert_allclose((weights * per_token).sum(), 0.8 * agent + 0.2 * designer,
                               rtol=1e-5)
  plain = token_weights(mask, "token_mean")  # without balance the designer's share is its tokens'
  np.testing.assert_allclose(plain[roles == 1].sum(), 24 / 42, rtol=1e-6)
  only_agent = token_weights(mask[:3], "token_mean", roles[:3], designer_share=0.2)
  np.testing.assert_allclose(only_agent.sum(), 1.0, rtol=1e-6)  # an absent role gives way


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="unknown config.rl field.*lerning_rate"):
    RLConfig.from_config({"lerning_rate": 1e-3})
  with pytest.raises(ValueError, match="config.rl.kl_estimator='k9'"):
    RLConfig.from_config({"kl_estimator": "k9"})
  with pytest.raises(ValueError, match="config.rl.clip_low=1.5"):
    RLConfig.from_config({"clip_low": 1.5})
  with pytest.raises(ValueError, match="config.rl.tis_cap=-1.0: expected >= 0"):
    RLConfig.from_config({"tis_cap": -1.0})
  with pytest.raises(ValueError, match="config.rl.designer_temperature is not a setting: it "
                     "is derived from config.sampling.designer.temperature"):
    RLConfig.from_config({"designer_temperature": 0.3})
  with pytest.raises(ValueError, match="config.rl.adv_std_bessel=1: expected a bool"):
    RLConfig.from_config({"adv_std_bessel": 1})
  with pytest.raises(ValueError, match="total_steps"):
    RLConfig.from_config({"schedule": "cosine", "warmup_steps": 10, "total_steps": 10})
  cfg = RLConfig.from_config({"learning_rate": 1, "micro_batch_size": 4.0})
  assert cfg.learning_rate == 1.0 and isinstance(cfg.micro_batch_size, int)
