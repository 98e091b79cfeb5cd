"""Each row's log-probs are taken at the temperature its role was sampled at.

The designer and the agent may sample at different temperatures (config.sampling.<role>);
the step must then divide each row's logits by its own role's, or the importance ratio of
the other role's rows measures the temperature gap instead of the policy change.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.model import get_preset
from spade_jax.model.testing import random_model
from spade_jax.rl.batch import AGENT, DESIGNER
from spade_jax.rl.config import RLConfig
from spade_jax.rl.train_step import _micro_loss

AGENT_TEMPERATURE, DESIGNER_TEMPERATURE = 1.0, 0.3
ROLES = np.array([AGENT, AGENT, DESIGNER, DESIGNER], np.int32)
LENGTH, PROMPT = 24, 8  # tokens a row; the first PROMPT carry no loss


def _sampling_logprobs(model, tokens: np.ndarray, temperatures: np.ndarray) -> np.ndarray:
  """logp[b, t] of tokens[b, t] under the full softmax of the logits / temperatures[b]."""
  logits = np.asarray(nnx.jit(lambda m, x: m(x))(model, jnp.asarray(tokens)), np.float64)
  logits = logits / temperatures[:, None, None]
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  picked = np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
  return np.pad(picked, ((0, 0), (1, 0)))


def _micro_batch_sampled_at_role_temperatures(model) -> dict[str, np.ndarray]:
  tokens = np.random.default_rng(0).integers(1, 1024, (len(ROLES), LENGTH)).astype(np.int32)
  loss = np.zeros(tokens.shape, np.float32)
  loss[:, PROMPT:] = 1
  temperatures = np.where(ROLES == DESIGNER, DESIGNER_TEMPERATURE, AGENT_TEMPERATURE)
  behaviour = np.where(loss > 0, _sampling_logprobs(model, tokens, temperatures), 0.0)
  return dict(tokens=tokens, attention_mask=np.ones_like(tokens), loss_mask=loss,
              behaviour_logprobs=behaviour.astype(np.float32), roles=ROLES,
              advantages=np.array([1.0, -1.0, 1.0, -1.0], np.float32),
              weights=loss / loss.sum())


def test_each_row_is_scored_at_its_roles_sampling_temperature():
  model = random_model(get_preset("tiny", num_layers=1))
  mb = _micro_batch_sampled_at_role_temperatures(model)
  cfg = RLConfig(logprob_chunk=8, agent_temperature=AGENT_TEMPERATURE,
                 designer_temperature=DESIGNER_TEMPERATURE)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  _, sums = jax.jit(functools.partial(_micro_loss, graphdef=graphdef, cfg=cfg))(
      params, None, rest, mb)
  for role in ("agent", "designer"):
    assert float(sums[f"{role}/gap_max"]) < 1e-4, role
    assert abs(float(sums[f"{role}/ratio_max"]) - 1.0) < 1e-4, role
