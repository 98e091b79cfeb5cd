"""The supervised step: its loss is the masked mean next-token NLL (NumPy reference), it falls
on a repeated batch, and the batch plans are pure functions of the step."""

import jax
import numpy as np
from flax import nnx

from proj.starter import registry
from proj.starter.batches import BucketPlan, WindowPlan
from proj.starter.lm_step import batch_multiple, compile_lm_step
from proj.starter.train_stage import StageSettings
from spade_jax.model import make_mesh
from spade_jax.model.sharding import state_shardings
from spade_jax.model.testing import random_model
from spade_jax.rl.optim import make_optimizer

TOL = 1e-5
CFG = registry.PRESETS["starter-ci"].replace(vocab_size=128, num_layers=1)


def _examples(rng, n):
  out = []
  for _ in range(n):
    length = int(rng.integers(40, 250))
    mask = np.zeros(length, np.int32)
    mask[int(rng.integers(5, length - 5)):] = 1  # the reply after a prompt
    out.append((rng.integers(0, CFG.vocab_size, length).tolist(), mask.tolist()))
  return out


def _reference_loss(model, batch):
  """-sum(w_t * log p(x_t | x_<t)) from the full logits, in float64 NumPy."""
  tokens, attn, weights = (np.asarray(batch[k][0]) for k in ("tokens", "attention_mask",
                                                            "weights"))
  logits = np.asarray(model(tokens, attention_mask=attn), np.float64)  # [B, T, V]
  shifted = logits - logits.max(-1, keepdims=True)
  logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))  # log-softmax
  picked = np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
  return -float(np.sum(weights[:, 1:] * picked))


def test_loss_matches_reference_and_decreases():
  mesh = make_mesh({"fsdp": -1})
  rng = np.random.default_rng(0)
  plan = BucketPlan.build(_examples(rng, 12), max_length=256, tokens_per_step=2048,
                          multiple_of=batch_multiple(mesh), chunk=32)
  batch = plan.batch(0)
  assert abs(batch["weights"].sum() - 1.0) < 1e-6
  model = random_model(CFG, seed=0)
  expected = _reference_loss(model, batch)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  params = jax.device_put(params, state_shardings(params, mesh))
  tx = make_optimizer(StageSettings(num_steps=20, learning_rate=3e-3,
                                    warmup_steps=1).optimizer_config())
  step, init, batch_sharding = compile_lm_step(graphdef, tx, mesh, params, rest, chunk=32)
  opt_state = init(params)
  losses = []
  for _ in range(6):
    params, opt_state, metrics = step(params, opt_state, rest, jax.device_put(batch,
                                                                              batch_sharding))
    losses.append(float(metrics["loss"]))
  np.testing.assert_allclose(losses[0], expected, rtol=TOL)
  assert losses[-1] < losses[0] - 0.05, losses


def test_plans_are_pure_functions_of_the_step():
  rng = np.random.default_rng(1)
  plan = BucketPlan.build(_examples(rng, 30), max_length=256, tokens_per_step=1024,
                          multiple_of=2, chunk=16, seed=3)
  assert plan.steps_per_epoch() >= 3
  for step in (0, 1, plan.steps_per_epoch() + 1):
    a, b = plan.batch(step), plan.batch(step)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["tokens"].shape[1] % 2 == 0 and a["tokens"].shape[2] in (256,)
    # every loss position is listed in positions (logits are computed there)
    rows = np.nonzero(a["weights"][0])
    assert set(zip(*rows, strict=True)) <= {(r, int(p)) for r, ps in enumerate(a["positions"][0])
                                            for p in ps if p > 0}
  assert sorted(i for b in plan.batches for i in b) == list(range(len(plan.tokens)))
  windows = WindowPlan.from_documents([list(range(50))] * 5, eot_id=99, length=16, rows=3)
  assert windows.windows.shape == (15, 16)
  assert np.array_equal(windows.batch(7)["tokens"], windows.batch(7)["tokens"])
  epoch = np.concatenate([windows.batch(s)["tokens"][0] for s in range(5)])  # 15 windows
  assert len({w.tobytes() for w in epoch}) == 15  # one epoch visits every window once
