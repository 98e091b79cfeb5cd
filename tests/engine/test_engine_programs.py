"""How many engine programs one step of the games configs compiles.

The rollout engine the loop builds (`run.build_engine` from the config's `engine` section) is
driven through one step's requests, as the loop sends them: the designer prompts of a refresh,
then every episode, each next turn submitted as soon as its reply comes back. slot_engine's
jitted calls are replaced by recorders that note each call's program (the function, its
static arguments and its argument shapes: what `jax.jit` compiles once each) and return
outputs of the right shapes, so no model runs. Each program is a whole-model compile on TPU.
"""

import collections

import jax
import numpy as np
import pytest
from absl import flags

from spade_jax import config_schema
from spade_jax.engine import slot_engine
from spade_jax.engine.state import init_decode_state
from spade_jax.engine.workload import play
from spade_jax.model.config import ModelConfig
from spade_jax.model.testing import random_model
from spade_jax.run import build_engine

# The program count depends on the engine's sizes, not the model's: the smallest Qwen3.
TINY = ModelConfig(vocab_size=64, hidden_size=8, num_layers=1, num_heads=1, num_kv_heads=1,
                   head_dim=2, intermediate_size=8)
MOST_PROGRAMS = 12  # a handful (issue 47): appends, the decode block, nothing resized


def _signature(tree) -> tuple:
  """What jit compiles a program for: the tree's structure, its arrays' shapes and dtypes,
  its other leaves (static arguments) as they are."""
  leaves, treedef = jax.tree.flatten(tree)
  return treedef, tuple((x.shape, str(x.dtype)) if hasattr(x, "shape") else x for x in leaves)


class ProgramRecorder:
  """slot_engine's jitted calls, recorded instead of run: `programs` holds one entry per
  distinct (function, signature); the fakes return the decode state at the capacity the real
  call would give it and zero tokens, valid in every active row."""

  def __init__(self, monkeypatch):
    self.programs: set[tuple] = set()
    for name, fake in (("_append", self._append), ("_generate", self._generate),
                       ("_resize", self._resize), ("_move", self._move)):
      monkeypatch.setattr(slot_engine, name, self._recording(name, fake))

  def _recording(self, name, fake):
    def call(*args, **kwargs):
      self.programs.add((name, _signature(args), _signature(kwargs)))
      return fake(*args, **kwargs)
    return call

  def per_function(self) -> dict[str, int]:
    return dict(collections.Counter(name for name, _, _ in self.programs))

  @staticmethod
  def _append(graphdef, params, state, slots, *rest, length):
    return state, np.zeros(len(slots), np.int32), np.zeros(len(slots), np.float32)

  @staticmethod
  def _generate(graphdef, params, state, active, num_steps):
    rows = len(active)
    valid = np.repeat(np.asarray(active)[:, None], num_steps, axis=1)
    return (state, np.zeros((rows, num_steps), np.int32),
            np.zeros((rows, num_steps), np.float32), valid)

  @staticmethod
  def _resize(state, cfg, rows, length, max_stop_ids):
    dtype = state.cache.k[0].dtype
    return jax.eval_shape(lambda: init_decode_state(cfg, rows, length, max_stop_ids, dtype))

  @staticmethod
  def _move(state, src, dst):
    return state


def _experiment(name: str):
  config, _ = config_schema.parse_config_args(["plan", "--config", name], flags.FlagValues())
  return config_schema.validate(config, files=False)


def games_step(experiment, seed: int = 0) -> tuple[list[dict], list[dict]]:
  """(designer jobs, episode jobs) of one step with a refresh; a job is dict(prompt,
  budgets: reply lengths, obs: the observation after every turn but the last).

  Counts and caps are the config's: one designer prompt per environment (about 4k tokens,
  issue 47's figure), 2 arms (hint and no hint) x group_size episodes per environment of up
  to max_turns turns. Lengths are drawn: first prompts 500-2,000 tokens, observations
  20-600, replies up to the role's max_new_tokens.
  """
  rng = np.random.default_rng(seed)
  s = experiment.selfplay
  tokens = lambda n: rng.integers(0, TINY.vocab_size, int(n)).tolist()
  designer_new = s.designer_sampling.max_new_tokens
  agent_new = s.agent_sampling.max_new_tokens
  designer = [dict(prompt=tokens(rng.integers(3500, 4600)),
                   budgets=[int(rng.integers(designer_new // 4, designer_new + 1))], obs=[])
              for _ in range(s.num_envs)]
  episodes = []
  for _ in range(s.num_envs * 2 * s.group_size):
    turns = int(rng.integers(1, s.max_turns + 1))
    episodes.append(dict(prompt=tokens(rng.integers(500, 2001)),
                         budgets=rng.integers(16, agent_new + 1, turns).tolist(),
                         obs=[tokens(rng.integers(20, 601)) for _ in range(turns - 1)]))
  return designer, episodes


@pytest.mark.parametrize("config", ["games.py", "games_lora.py"])
def test_a_games_step_compiles_a_handful_of_engine_programs(config, monkeypatch):
  """Appends (one per prefill bucket and read length) and one decode block; the decode
  state keeps one capacity, so nothing is resized or moved. With the default ladders
  (decode widths x lengths, rows in powers of four) a games.py step compiles 104 (52 appends,
  14 decode blocks, 31 resizes, 7 moves), a games_lora.py step 70."""
  experiment = _experiment(config)
  recorder = ProgramRecorder(monkeypatch)
  engine = build_engine(experiment.engine, random_model(TINY), mesh=None)
  designer, episodes = games_step(experiment)
  turns = play(engine, designer).turns + play(engine, episodes).turns
  assert turns >= len(designer) + len(episodes)
  counts = recorder.per_function()
  assert len(recorder.programs) <= MOST_PROGRAMS, counts
  assert set(counts) == {"_append", "_generate"}, counts
