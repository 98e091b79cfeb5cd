"""The self-play loop's settings: one frozen struct read from the experiment config.

`SelfPlaySettings.from_config(config)` reads `config.seed`, `config.setting`,
`config.selfplay.*` and `config.sampling.{designer, agent}` (field names in COMMON config
schema / configs/*.py). Values the loop cannot run with raise a ValueError naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from spade_jax.engine.api import SamplingParams
from spade_jax.selfplay.episodes import check_action_format
from spade_jax.selfplay.prompts import SETTINGS, designer_system_prompt
from spade_jax.selfplay.regret import get_designer_reward


@dataclasses.dataclass(frozen=True)
class SelfPlaySettings:
  """What one self-play step does; see docs/selfplay.md for each field's default and why."""

  skills: tuple[str, ...]
  seed: int = 0
  setting: str = "games"
  num_envs: int = 24
  k: int = 4
  group_size: int = 8
  categories_per_step: int = 3
  max_turns: int = 8
  action_format: str = "<action>{}</action>"
  designer_reward: str = "hint_regret"
  invalid_designer_reward: float = -1.0
  use_corpus: bool = True
  use_memory: bool = True
  train_designer: bool = True
  fixed_envs: bool = False
  fill_from_memory: bool = False
  train_agent_on_hint_arm: bool = False
  memory_capacity: int = 512
  memory_sample_size: int = 4
  designer_sampling: SamplingParams = SamplingParams(max_new_tokens=2048)
  agent_sampling: SamplingParams = SamplingParams(max_new_tokens=256)
  max_cache_len: int | None = None  # the engine's tokens per conversation (None: unbounded)

  def __post_init__(self):
    if self.setting not in SETTINGS:
      raise ValueError(f"config.setting={self.setting!r}; expected one of {SETTINGS}")
    for name, low in (("num_envs", 1), ("k", 1), ("group_size", 2), ("max_turns", 1),
                      ("categories_per_step", 1), ("memory_capacity", 1),
                      ("memory_sample_size", 0)):
      if getattr(self, name) < low:
        raise ValueError(f"config.selfplay.{name}={getattr(self, name)} must be >= {low}")
    if not self.skills:
      raise ValueError("config.selfplay.skills is empty: name at least one skill category")
    if len(set(self.skills)) != len(self.skills):
      raise ValueError(f"config.selfplay.skills={self.skills} has duplicates")
    if self.categories_per_step > len(self.skills):
      raise ValueError(f"config.selfplay.categories_per_step={self.categories_per_step} exceeds "
                       f"the {len(self.skills)} skills {self.skills}")
    check_action_format(self.action_format)
    get_designer_reward(self.designer_reward)
    designer_system_prompt(self.setting, self.designer_reward)  # the reward has prompt text

  def max_prompt_tokens(self, params: SamplingParams) -> int | None:
    """Longest prompt that leaves room for a whole reply in the engine's cache."""
    return None if self.max_cache_len is None else self.max_cache_len - params.max_new_tokens

  @classmethod
  def from_config(cls, config: Any) -> SelfPlaySettings:
    sp = config.selfplay
    return cls(
        skills=tuple(sp.skills), seed=int(config.seed), setting=str(config.setting),
        num_envs=int(sp.num_envs), k=int(sp.k), group_size=int(sp.group_size),
        categories_per_step=int(sp.categories_per_step), max_turns=int(sp.max_turns),
        action_format=str(sp.action_format), designer_reward=str(sp.designer_reward),
        invalid_designer_reward=float(sp.invalid_designer_reward),
        use_corpus=bool(sp.use_corpus), use_memory=bool(sp.use_memory),
        train_designer=bool(sp.train_designer), fixed_envs=bool(sp.fixed_envs),
        fill_from_memory=bool(sp.fill_from_memory),
        train_agent_on_hint_arm=bool(sp.train_agent_on_hint_arm),
        memory_capacity=int(sp.memory.capacity), memory_sample_size=int(sp.memory.sample_size),
        designer_sampling=sampling_params(config.sampling.designer, "designer"),
        agent_sampling=sampling_params(config.sampling.agent, "agent"),
        max_cache_len=int(config.engine.max_cache_len))


def sampling_params(values: Mapping[str, Any] | Any, role: str) -> SamplingParams:
  """SamplingParams from config.sampling.<role> (max_new_tokens, temperature, top_p, top_k)."""
  get = values.get  # dict or ConfigDict
  if get("max_new_tokens") is None:
    raise ValueError(f"config.sampling.{role}.max_new_tokens is required")
  params = SamplingParams(max_new_tokens=int(get("max_new_tokens")),
                          temperature=float(get("temperature", 1.0)),
                          top_p=float(get("top_p", 1.0)), top_k=int(get("top_k", 0)))
  if params.max_new_tokens <= 0:
    raise ValueError(f"config.sampling.{role}.max_new_tokens={params.max_new_tokens} must be > 0")
  return params
