"""The Trainer applies rl.role_balance: the designer rows get designer_loss_share of the loss.

Each row's per-token loss depends on that row alone (its own advantage and log-probs), so
with role balance the batch loss is (1 - s) * L_agent + s * L_designer, where L_role is the
loss of that role's rows trained alone; without it the roles mix by their token counts.
The per-role metrics are likewise each role's figures alone, and TIS touches agent rows only.
"""

import dataclasses
import functools

import jax
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset
from spade_jax.rl.batch import AGENT, DESIGNER, TrainBatch
from spade_jax.rl.config import RLConfig
from spade_jax.rl.train_step import _micro_loss
from spade_jax.rl.trainer import Trainer

# No warmup: the first step must move the parameters. Micro-batches of 4 rows: the mixed
# batch is [agent rows, designer rows], each role alone is one micro-batch of the same shape.
RL = dict(learning_rate=3e-3, warmup_steps=0, schedule="constant", micro_batch_size=4,
          logprob_chunk=16, loss_agg="token_mean")
LENGTH = 32
# Loss tokens per row: short agent turns, long designer outputs (4 x 4 vs 4 x 20 tokens on
# average), so the token-count mix and the configured share differ a lot.
AGENT_LENGTHS, DESIGNER_LENGTHS = (2, 8, 3, 6), (10, 16, 24, 30)


@pytest.fixture(scope="module")
def initial():
  return nnx.split(Qwen3(get_preset("tiny", num_layers=1), rngs=nnx.Rngs(0)))


def _trainer(initial, compiled, **rl) -> Trainer:
  graphdef, state = initial
  return Trainer(dict(RL, **rl), nnx.merge(graphdef, jax.tree.map(lambda x: x.copy(), state)),
                 compiled=compiled)


def _rows(role: int, lengths, rewards, groups, seed: int) -> TrainBatch:
  rng = np.random.default_rng(seed)
  rows = len(lengths)
  tokens = rng.integers(1, 1024, (rows, LENGTH)).astype(np.int32)
  loss = np.zeros((rows, LENGTH), np.float32)
  for row, n in enumerate(lengths):
    loss[row, 1:1 + n] = 1
  behaviour = np.where(loss > 0, -6.9 + rng.normal(0, 0.05, loss.shape), 0).astype(np.float32)
  return TrainBatch(tokens, np.ones((rows, LENGTH), np.int32), loss, behaviour,
                    np.asarray(rewards, np.float32), np.asarray(groups, np.int32),
                    np.full(rows, role, np.int32))


AGENT_ROWS = _rows(AGENT, AGENT_LENGTHS, (1.0, 0.0, 0.2, 0.9), (0, 0, 1, 1), seed=1)
DESIGNER_ROWS = _rows(DESIGNER, DESIGNER_LENGTHS, (0.0, 0.1, 0.6, 0.9), (2, 2, 2, 2), seed=2)
MIXED = TrainBatch(*(np.concatenate([getattr(AGENT_ROWS, f.name), getattr(DESIGNER_ROWS, f.name)])
                     for f in dataclasses.fields(TrainBatch)))


def _leaves(trainer: Trainer) -> list[np.ndarray]:
  return [np.asarray(x) for x in jax.tree.leaves(trainer.params)]


def test_trainer_gives_the_designer_rows_the_configured_share_of_the_loss(initial, compiled):
  share = 0.25
  balance = dict(role_balance=True, designer_loss_share=share)
  alone = {role: _trainer(initial, compiled, **balance).train_step(rows)["loss"]
           for role, rows in ((AGENT, AGENT_ROWS), (DESIGNER, DESIGNER_ROWS))}
  assert abs(alone[AGENT] - alone[DESIGNER]) > 0.1  # the check below can tell shares apart
  balanced = _trainer(initial, compiled, **balance).train_step(MIXED)
  np.testing.assert_allclose(balanced["loss"],
                             (1 - share) * alone[AGENT] + share * alone[DESIGNER], rtol=1e-5)
  tokens = {AGENT: sum(AGENT_LENGTHS), DESIGNER: sum(DESIGNER_LENGTHS)}
  pooled = _trainer(initial, compiled, **dict(balance, role_balance=False)).train_step(MIXED)
  np.testing.assert_allclose(
      pooled["loss"], sum(tokens[r] * alone[r] for r in alone) / sum(tokens.values()), rtol=1e-5)
  assert abs(pooled["loss"] - balanced["loss"]) > 0.05


def test_a_designer_share_of_zero_updates_as_if_the_designer_rows_were_dropped(initial, compiled):
  agent_only = _trainer(initial, compiled, role_balance=True, designer_loss_share=0.25)
  m_agent = agent_only.train_step(AGENT_ROWS)  # the agent's rows alone
  zero = _trainer(initial, compiled, role_balance=True, designer_loss_share=0.0)
  m_zero = zero.train_step(MIXED)
  for key in ("loss", "grad_norm"):
    np.testing.assert_allclose(m_zero[key], m_agent[key], rtol=1e-6, err_msg=key)
  moved = False
  for a, b, start in zip(_leaves(agent_only), _leaves(zero), jax.tree.leaves(initial[1]),
                         strict=True):
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    moved |= not np.array_equal(a, np.asarray(start))
  assert moved and m_zero["loss_tokens"] == sum(AGENT_LENGTHS) + sum(DESIGNER_LENGTHS)


ROLE_METRICS = ("clip_fraction", "importance_ratio_mean", "importance_ratio_max",
                "logprob_gap_mean", "logprob_gap_max", "kl", "tis_truncated_fraction",
                "loss_tokens")


def test_per_role_metrics_are_each_roles_own(initial, compiled):
  """train/agent/* and train/designer/* equal the pooled figures of each role trained alone
  (the same config and shapes as the share test above: nothing new to compile)."""
  balance = dict(role_balance=True, designer_loss_share=0.25)
  mixed = _trainer(initial, compiled, **balance).train_step(MIXED)
  alone = {name: _trainer(initial, compiled, **balance).train_step(rows)
           for name, rows in (("agent", AGENT_ROWS), ("designer", DESIGNER_ROWS))}
  for name, metrics in alone.items():
    for key in ROLE_METRICS:
      np.testing.assert_allclose(mixed[f"{name}/{key}"], metrics[key], rtol=1e-5, atol=1e-7,
                                 err_msg=f"{name}/{key}")
  assert "designer/clip_fraction" not in alone["agent"]  # a role without rows: no figures
  assert mixed["agent/logprob_gap_mean"] != mixed["designer/logprob_gap_mean"]


def test_the_step_gives_tis_to_the_agent_rows_only(initial):
  """With tis_cap > 0 the step passes the roles on: only agent tokens can be truncated."""
  graphdef, params, rest = nnx.split(nnx.merge(*initial), nnx.Param, ...)
  loss = MIXED.loss_mask
  mb = dict(tokens=MIXED.tokens, attention_mask=MIXED.attention_mask, loss_mask=loss,
            behaviour_logprobs=MIXED.behaviour_logprobs, roles=MIXED.roles,
            advantages=np.linspace(-1, 1, MIXED.num_rows).astype(np.float32),
            weights=(loss / loss.sum()).astype(np.float32))
  cfg = RLConfig(tis_cap=1.0, logprob_chunk=16)  # ratios exp(+-0.05 noise): both sides of 1
  _, sums = jax.jit(functools.partial(_micro_loss, graphdef=graphdef, cfg=cfg))(
      params, None, rest, mb)
  assert float(sums["agent/truncated_sum"]) > 0 == float(sums["designer/truncated_sum"])
  assert float(sums["designer/ratio_max"]) > 1  # it would have been truncated
  assert float(sums["truncated_sum"]) == float(sums["agent/truncated_sum"])
