"""Each row's log-probs are taken at the temperature its role was sampled at.

The designer and the agent may sample at different temperatures (config.sampling.<role>);
the step must then divide each row's logits by its own role's, or the importance ratio of
the other role's rows measures the temperature gap instead of the policy change.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset
from spade_jax.rl.batch import AGENT, DESIGNER, TrainBatch
from spade_jax.rl.config import RLConfig
from spade_jax.rl.trainer import Trainer

AGENT_TEMPERATURE, DESIGNER_TEMPERATURE = 1.0, 0.3
ROLES = np.array([AGENT, AGENT, DESIGNER, DESIGNER], np.int32)
LENGTH, PROMPT = 24, 8  # tokens a row; the first PROMPT carry no loss


@pytest.fixture
def model():
  return Qwen3(get_preset("tiny", num_layers=1), rngs=nnx.Rngs(0))


def _sampling_logprobs(model, tokens: np.ndarray, temperatures: np.ndarray) -> np.ndarray:
  """logp[b, t] of tokens[b, t] under the full softmax of the logits / temperatures[b]."""
  logits = np.asarray(model(jnp.asarray(tokens)), np.float64) / temperatures[:, None, None]
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  picked = np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
  return np.pad(picked, ((0, 0), (1, 0)))


def _batch_sampled_at_role_temperatures(model) -> TrainBatch:
  tokens = np.random.default_rng(0).integers(1, 1024, (len(ROLES), LENGTH)).astype(np.int32)
  loss = np.zeros(tokens.shape, np.float32)
  loss[:, PROMPT:] = 1
  temperatures = np.where(ROLES == DESIGNER, DESIGNER_TEMPERATURE, AGENT_TEMPERATURE)
  behaviour = np.where(loss > 0, _sampling_logprobs(model, tokens, temperatures), 0.0)
  return TrainBatch(tokens, np.ones_like(tokens), loss, behaviour.astype(np.float32),
                    np.array([0.0, 1.0, 0.2, 0.8], np.float32), np.array([0, 0, 1, 1], np.int32),
                    ROLES)


def test_each_role_is_scored_at_its_own_sampling_temperature(model):
  batch = _batch_sampled_at_role_temperatures(model)
  rl = RLConfig(learning_rate=1e-3, warmup_steps=0, logprob_chunk=8,
                agent_temperature=AGENT_TEMPERATURE, designer_temperature=DESIGNER_TEMPERATURE)
  metrics = Trainer(rl, model).train_step(batch)
  for role in ("agent", "designer"):
    assert metrics[f"{role}/logprob_gap_max"] < 1e-4, role
    assert abs(metrics[f"{role}/importance_ratio_max"] - 1.0) < 1e-4, role
  assert metrics["clip_fraction"] == 0.0
