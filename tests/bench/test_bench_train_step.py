"""bench/train_step.py's transformers GRPO step computes our objective: loss, gradient, KL."""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from spade_jax.model import get_preset
from spade_jax.model.hf_io import from_pretrained, save_pretrained
from spade_jax.model.testing import random_model
from spade_jax.rl.aggregation import token_weights
from spade_jax.rl.batch import TrainBatch
from spade_jax.rl.config import RLConfig
from spade_jax.rl.losses import grpo_token_loss
from spade_jax.rl.trainer import Trainer

_PATH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "train_step.py"
_SPEC = importlib.util.spec_from_file_location("bench_train_step", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

RL = dict(learning_rate=2e-3, beta=0.5, kl_estimator="k3", weight_decay=0.01)
ROWS, SEQ, PROMPT = 4, 32, 8


def _ours(logp, behaviour, ref, adv, mask, cfg):
  """Our step's loss (token-mean weights) and mean KL, as a function of logp."""
  per_token, terms = grpo_token_loss(logp, behaviour, ref, adv, mask, cfg)
  weights = jnp.asarray(token_weights(np.asarray(mask), cfg.loss_agg))
  return jnp.sum(weights * per_token), jnp.sum(terms["kl"]) / jnp.sum(mask)


def test_torch_grpo_loss_and_gradient_equal_ours():
  rng = np.random.default_rng(0)
  shape = (ROWS, 12)
  behaviour = (-5.0 + rng.normal(0, 1, shape)).astype(np.float32)
  logp = (behaviour + rng.normal(0, 0.4, shape)).astype(np.float32)
  ref = (logp + rng.normal(0, 0.5, shape)).astype(np.float32)
  adv = rng.normal(0, 1, ROWS).astype(np.float32)
  mask = (rng.random(shape) < 0.7).astype(np.float32)
  cfg = RLConfig.from_config(RL)
  ratio = np.exp(logp - behaviour)
  clipped = (ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)
  assert clipped[mask > 0].any() and not clipped[mask > 0].all()

  (loss, kl), grad = jax.value_and_grad(_ours, has_aux=True)(
      jnp.asarray(logp), behaviour, ref, adv, mask, cfg)
  t_logp = torch.tensor(logp, requires_grad=True)
  t_loss, t_kl = bench.torch_grpo_loss(
      t_logp, torch.tensor(behaviour), torch.tensor(ref), torch.tensor(adv), torch.tensor(mask),
      beta=cfg.beta, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
  t_loss.backward()
  np.testing.assert_allclose(t_loss.item(), loss, rtol=1e-5)
  np.testing.assert_allclose(t_kl.item(), kl, rtol=1e-5)
  np.testing.assert_allclose(t_logp.grad.numpy(), grad, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  path = tmp_path_factory.mktemp("tiny")
  cfg = get_preset("tiny")
  save_pretrained(random_model(cfg, seed=0, std=0.1), path)
  bench.write_inputs(str(path), cfg.vocab_size, RL, batch=ROWS, seq=SEQ, prompt=PROMPT)
  return str(path)


def _trainer_metrics(checkpoint, steps):
  x, rl = bench.read_inputs(checkpoint)
  batch = TrainBatch(tokens=x["tokens"], attention_mask=np.ones_like(x["tokens"]),
                     loss_mask=x["loss_mask"], behaviour_logprobs=x["behaviour_logprobs"],
                     rewards=x["rewards"], group_ids=x["group_ids"], roles=x["roles"])
  trainer = Trainer(RLConfig(**rl), from_pretrained(checkpoint, dtype="float32"))
  return [trainer.train_step(batch) for _ in range(steps)]


def test_torch_step_matches_trainer_with_a_separate_frozen_reference(checkpoint):
  x, rl = bench.read_inputs(checkpoint)
  model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
  model.train()
  step = bench.TorchGRPOStep(model, rl)
  policy_storage = {p.data_ptr() for p in model.parameters()}
  assert not policy_storage & {p.data_ptr() for p in step.ref.parameters()}
  inputs = bench.torch_step_inputs(x, PROMPT)
  ref_before = [p.detach().clone() for p in step.ref.parameters()]

  ours = _trainer_metrics(checkpoint, steps=3)
  theirs = [step(*inputs, "float32") for _ in range(3)]
  assert ours[0]["kl"] < 1e-9 and theirs[0]["kl"] < 1e-9  # policy == reference at step 1
  assert ours[2]["kl"] > 1e-3  # the KL term is exercised from step 2 on
  for mine, other in zip(ours, theirs, strict=True):
    for key in ("loss", "kl", "entropy"):
      np.testing.assert_allclose(other[key], mine[key], rtol=1e-4, atol=1e-6, err_msg=key)
  for before, after in zip(ref_before, step.ref.parameters(), strict=True):
    torch.testing.assert_close(after, before, rtol=0, atol=0)
  assert not all(torch.equal(a, b) for a, b in zip(ref_before, model.parameters(), strict=True))
