"""LoRA training: only the adapters move, the reference is the base, sharding and resume."""

import jax
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset, make_mesh
from spade_jax.model.lora import BASE, LoRAParam
from spade_jax.rl.checkpoint import CheckpointManager
from spade_jax.rl.trainer import Trainer
from tests.rl.test_rl_trainer import RL, _batch, _leaves, _train_alike

CFG = get_preset("tiny", lora_rank=4, lora_alpha=8.0)


def _lora_model(seed=0):
  return Qwen3(CFG, rngs=nnx.Rngs(seed))


def test_only_the_adapters_train_and_the_reference_is_the_base(compiled):
  model = _lora_model()
  base = _leaves(nnx.state(model, BASE))
  adapters = _leaves(nnx.state(model, LoRAParam))
  trainer = Trainer(RL, model, compiled=compiled)
  # The optimiser holds moments of the adapters only (AdamW: mu and nu per adapter).
  moment_shapes = sorted(x.shape for x in jax.tree.leaves(trainer.opt_state) if x.ndim)
  assert moment_shapes == sorted([x.shape for x in adapters] * 2)
  first = trainer.train_step(_batch(0))
  assert first["kl"] < 1e-9  # B = 0: the policy is the reference (the base)
  trainer.train_step(_batch(1))
  for before, after in zip(base, _leaves(nnx.state(trainer.policy, BASE)), strict=True):
    np.testing.assert_array_equal(before, after)  # no update reached a base weight
  moved = [not np.array_equal(a, b) for a, b in
           zip(adapters, _leaves(nnx.state(trainer.policy, LoRAParam)), strict=True)]
  assert all(moved), moved
  assert trainer.train_step(_batch(2))["kl"] > 0  # adapters on vs off now differ


def test_sharded_lora_step_equals_unsharded(compiled):
  plain = Trainer(RL, _lora_model(), compiled=compiled)
  sharded = Trainer(RL, _lora_model(), make_mesh({"data": 2, "fsdp": 2, "tensor": 2}),
                    compiled=compiled)
  assert any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(sharded.trained_params))
  _train_alike(plain, sharded, ("loss", "kl", "entropy", "grad_norm", "logprob_gap_mean"),
               metric_atol=1e-6)


def test_lora_resume_is_bit_exact_and_refuses_another_base(tmp_path, compiled):
  straight = Trainer(RL, _lora_model(), seed=3, compiled=compiled)
  for step in range(3):
    straight.train_step(_batch(step))

  def trainer(seed=0):
    return Trainer(RL, _lora_model(seed), seed=3, compiled=compiled,
                   checkpoints=CheckpointManager(tmp_path / "checkpoints", save_every=2))

  first = trainer()
  for step in range(2):
    first.train_step(_batch(step))
    first.maybe_save({"position": step + 1})
  first.close()
  with pytest.raises(ValueError, match=r"checkpoints/2: LoRA checkpoint of base \w+ cannot "
                                       r"resume on base \w+"):
    trainer(seed=1).restore()  # other base weights
  resumed = trainer()
  assert resumed.restore() == {"position": 2}
  resumed.train_step(_batch(2))
  for a, b in zip(_leaves((straight.params, straight.opt_state)),
                  _leaves((resumed.params, resumed.opt_state)), strict=True):
    np.testing.assert_array_equal(a, b)
  # The checkpoint holds the adapters only: no copy of the base weights.
  saved = {p.name for p in (tmp_path / "checkpoints" / "2" / "params").rglob("*")}
  # A and B of 7 projections, each stacked over the one group's 2 layers.
  adapters = jax.tree.leaves(resumed.trained_params)
  assert saved and len(adapters) == 2 * 7 and all(a.shape[0] == 2 for a in adapters)
