"""Fixed training shapes: a run compiles its train step at most twice.

The run's config bounds its batches (`rl.bounds`, derived from the self-play settings): every
step pads to the agent-only shape or to the shape with designer rows, whatever the number of
valid designs that came due or the longest row of the step. The padding changes no update,
and a batch past the bounds fails before anything runs, naming the config field.
"""

import dataclasses

import jax
import numpy as np
import pytest
from absl import flags
from flax import nnx

from spade_jax import config_schema
from spade_jax.model import Qwen3, get_preset
from spade_jax.rl.batch import AGENT, DESIGNER
from spade_jax.rl.step_inputs import padded_length
from spade_jax.rl.trainer import Trainer
from spade_jax.selfplay.batching import Sample, agent_samples, build_train_batch
from spade_jax.selfplay.episodes import Episode, EpisodeSpec

# (agent rows, designer rows, longest row) of successive steps: designs come due or not, any
# number of them valid, and the episodes' lengths vary.
STEPS = ((6, 0, 40), (5, 3, 128), (4, 1, 70), (6, 2, 20), (3, 0, 100), (6, 3, 90))


def _config(**overrides):
  """smoke.py made small: 3 environments, G = 2, k = 2, rows of at most 128 tokens."""
  config, _ = config_schema.parse_config_args(["test", "--config", "smoke.py"],
                                              flags.FlagValues())
  config.selfplay.num_envs, config.selfplay.group_size, config.selfplay.k = 3, 2, 2
  config.selfplay.max_turns = 2
  config.sampling.agent.max_new_tokens, config.sampling.designer.max_new_tokens = 8, 16
  config.engine.max_cache_len, config.engine.prefill_buckets = 128, (64,)
  config.engine.decode_lengths = (128,)
  config.train.num_steps = 4  # its last step does not refresh: one refresh's designs due
  config.rl.learning_rate = 1.7e-3  # this file's own compiled step (Trainers share by config)
  for path, value in overrides.items():
    section, name = path.split(".")
    config[section][name] = value
  return config


def _experiment(**overrides):
  return config_schema.validate(_config(**overrides), files=False)


def _model():
  return Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0))


def _sample(rng, role, length, loss, group):
  logprobs = np.minimum(-6.9 + rng.normal(0, 0.05, loss), 0).tolist()
  return Sample(rng.integers(1, 1024, length).tolist(), [0] * (length - loss) + [1] * loss,
                [0.0] * (length - loss) + logprobs, float(rng.random()), group, role)


def _batch(step, agent, designer, longest, loss=8):
  """`agent` episodes in groups of 2 (the first `longest` tokens long), then `designer`
  designs of one refresh."""
  rng = np.random.default_rng(step)
  lengths = [longest] + rng.integers(loss + 1, longest + 1, agent + designer - 1).tolist()
  roles = [AGENT] * agent + [DESIGNER] * designer
  return build_train_batch(
      [_sample(rng, role, n, loss, f"agent/{i // 2}" if role == AGENT else "designer")
       for i, (role, n) in enumerate(zip(roles, lengths, strict=True))], pad_id=0)


def test_a_run_compiles_its_train_step_at_most_twice(compiled):
  trainer = Trainer(_experiment().rl, _model(), compiled=compiled)
  for step, shape in enumerate(STEPS):
    metrics = trainer.train_step(_batch(step, *shape))
    assert np.isfinite(metrics["loss"]) and metrics["loss_tokens"] == 8 * sum(shape[:2])
  assert trainer._fns.step._cache_size() == 2  # agent-only, and with designer rows


def test_padding_to_the_bounds_changes_no_update(compiled):
  rl = _experiment().rl
  fixed = Trainer(rl, _model(), compiled=compiled)
  own = Trainer(dataclasses.replace(rl, bounds=None), _model(), compiled=compiled)
  batch = _batch(0, 5, 2, 70)
  m_fixed, m_own = fixed.train_step(batch), own.train_step(batch)
  for key in ("loss", "kl", "grad_norm", "designer/loss_tokens", "agent/clip_fraction"):
    np.testing.assert_allclose(m_fixed[key], m_own[key], rtol=2e-5, atol=1e-7, err_msg=key)
  for a, b in zip(jax.tree.leaves(fixed.params), jax.tree.leaves(own.params), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "loss", "message"), [
    ((7, 0, 40), 8, r"7 agent rows; .* at most 6 \(selfplay.num_envs x selfplay.group_size"),
    ((6, 4, 40), 8, r"4 designer rows; .* at most 3 \(selfplay.num_envs per refresh"),
    ((2, 1, 129), 8, r"129 tokens in a row; .* at most 128 \(engine.max_cache_len\)"),
    ((2, 1, 40), 17, r"17 loss tokens in a row; .* at most 16 \(selfplay.max_turns x sampling"),
])
def test_a_batch_past_the_bounds_fails_before_the_step_naming_the_field(shape, loss, message,
                                                                        compiled):
  trainer = Trainer(_experiment().rl, _model(), compiled=compiled)
  with pytest.raises(ValueError, match=message):
    trainer.train_step(_batch(0, *shape, loss=loss))
  assert trainer.updates == 0


def test_bounds_follow_the_config():
  bounds = _experiment().rl.bounds
  assert (bounds.agent_rows, bounds.designer_rows, bounds.length, bounds.loss_tokens) == (
      6, 3, 128, 16)
  # The last step refreshes: its own refresh's designs are trained with the due ones.
  assert _experiment(**{"train.num_steps": 3}).rl.bounds.designer_rows == 6
  assert _experiment(**{"selfplay.k": 1}).rl.bounds.designer_rows == 6
  assert _experiment(**{"selfplay.train_agent_on_hint_arm": True}).rl.bounds.agent_rows == 12
  fixed = _experiment(**{"selfplay.fixed_envs": "grpo", "selfplay.train_agent_on_hint_arm": True})
  assert (fixed.rl.bounds.agent_rows, fixed.rl.bounds.designer_rows) == (6, 0)
  assert _experiment(**{"selfplay.train_designer": False}).rl.bounds.loss_tokens == 16  # 2 x 8


def test_long_rows_pad_to_a_multiple_of_128_not_a_power_of_two():
  assert [padded_length(t) for t in (1, 28, 100, 128, 129, 12288, 12289)] == [
      16, 32, 128, 128, 256, 12288, 12416]


def test_agent_rows_end_at_their_last_sampled_token():
  """The observation after the last reply (which may overflow the engine's cache) carries no
  loss and cannot change any loss token's log-prob: it is not trained on."""
  ep = Episode(EpisodeSpec(0, "e", "no_hint", "", None, 0, 0, 2))
  ep.append([1, 2, 3], sampled=False)
  ep.append([4, 5], sampled=True, logprobs=[-0.1, -0.2])
  ep.append([6, 7, 8, 9], sampled=False)
  (sample,) = agent_samples([ep], step=1, train_on_hint_arm=False)
  assert (sample.tokens, sample.loss_mask) == ([1, 2, 3, 4, 5], [0, 0, 0, 1, 1])
  assert sample.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2]
