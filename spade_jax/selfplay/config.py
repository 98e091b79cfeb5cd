"""The self-play loop's settings: one frozen struct, the single source of its defaults.

Each settable field of `SelfPlayConfig` (and the comment that says what it does) is written
once, below; its config path is `selfplay.<name>` unless `field_path` names another
(`seed`, `setting`, `selfplay.memory.*`, `sampling.<role>`). `config_defaults()` is the
config holding every field's default (`spade_jax.config_schema.base_config()` takes its
seed, setting, selfplay and sampling sections from it) and `read_config(config)` reads
every field back from its path, so a new field needs no other line.
`SelfPlayConfig.from_config(config, max_cache_len=...)` builds the struct; the engine's
cache length is derived (the experiment passes `config.engine.max_cache_len`). The struct
checks itself on construction, so the launcher's validation and the loop share one set of
checks; each failure names the config field, its value and what was expected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from spade_jax.checks import ConfigError, derived, is_int, is_number, require, settable_fields
from spade_jax.engine.api import SamplingParams
from spade_jax.envs.library import GAME_CATEGORIES, TOOL_CATEGORIES
from spade_jax.rl.batch import BatchBounds
from spade_jax.selfplay.designer_advantage import DESIGNER_ADVANTAGES
from spade_jax.selfplay.designer_rewards import get_designer_reward
from spade_jax.selfplay.prompts import DESIGNER_PROMPTS, SETTINGS, designer_system_prompt
from spade_jax.selfplay.replies import check_action_format
from spade_jax.selfplay.seed_envs import get_library, library_names

SETTING_CATEGORIES = {"games": GAME_CATEGORIES, "tool_use": TOOL_CATEGORIES}
RENAMED_LIBRARIES = {"probe": "vowels"}  # an old value fails naming its new one (issue 27)
FIXED_ENVS = ("", "grpo", "rlve")  # off; Fixed-env GRPO; Fixed-env RLVE (adaptive levels)
# The config path of each field whose name differs from its place under config.selfplay.
_FIELD_PATHS = {"seed": "seed", "setting": "setting", "memory_capacity": "selfplay.memory.capacity",
                "memory_sample_size": "selfplay.memory.sample_size",
                "designer_sampling": "sampling.designer", "agent_sampling": "sampling.agent"}


def field_path(name: str) -> str:
  """Where SelfPlayConfig's field `name` sits in the config, e.g. "selfplay.k"."""
  return _FIELD_PATHS.get(name, f"selfplay.{name}")


@dataclasses.dataclass(frozen=True)
class SelfPlayConfig:
  """What one self-play step does; docs/selfplay.md says why each default is what it is."""

  skills: tuple[str, ...] = GAME_CATEGORIES  # skill categories the designer is asked for
  seed: int = 0  # root of every random choice (categories, memory samples, resets, sampling)
  setting: str = "games"  # "games" or "tool_use": designer scaffold and agent action style
  num_envs: int = 24  # environments played per step (the step's budget)
  k: int = 4  # refresh interval of the environment set == designer update delay
  group_size: int = 8  # G episodes per arm (no hint / hint) per environment
  categories_per_step: int = 3  # categories drawn for each refresh
  max_turns: int = 8  # framework cap on episode length (the env's own may be smaller)
  action_format: str = "<action>{}</action>"  # agent action wrapper; {} = the action
  designer_reward: str = "hint_regret"  # or "ema_learning_potential" (selfplay/designer_rewards.py)
  designer_prompt: str = "full"  # or "compact" (prompts.DESIGNER_PROMPTS: no contract text)
  # The paper's "discard": invalid designs give no rows, regret is normalised among the
  # refresh's valid designs; "penalty": invalid_designer_reward in the same group;
  # "two_level": validity_weight * validity term + regret among the valid ones.
  designer_advantage: str = "discard"
  designer_group_by_category: bool = False  # one designer group per (refresh, category)
  invalid_designer_reward: float = -1.0  # "penalty": below any regret (>= -1)
  validity_weight: float = 1.0  # "two_level": weight of the validity term
  use_corpus: bool = True  # ground each designer prompt in a corpus passage
  use_memory: bool = True  # show the designer a sample of the environment memory
  train_designer: bool = True  # False = frozen designer (no designer gradient)
  # One of FIXED_ENVS: "" (SPADE), "grpo" or "rlve": num_envs library environments a step.
  fixed_envs: str = ""
  fill_from_memory: bool = False  # top up a short valid set with memory replays
  train_agent_on_hint_arm: bool = False  # hinted episodes only measure regret
  # The library memory starts from (selfplay/seed_envs.py): "seeds" (the setting's seed
  # environments), "vowels" (the dense-reward vowels environment in every skill, so a random
  # model earns varied returns) or one a project registers (proj/starter's "minigames").
  library: str = "seeds"
  memory_capacity: int = 512  # environments kept; eviction rule in selfplay/memory.py
  memory_sample_size: int = 4  # memory entries shown in each designer prompt
  designer_sampling: SamplingParams = SamplingParams(max_new_tokens=2048)
  agent_sampling: SamplingParams = SamplingParams(max_new_tokens=512)
  # The engine's tokens per conversation (None: unbounded), derived from config.engine.
  max_cache_len: int | None = derived(None, "engine.max_cache_len")

  def __post_init__(self):
    require(self.setting in SETTINGS, "setting", self.setting, f"one of {SETTINGS}")
    require(isinstance(self.seed, int), "seed", self.seed, "an int")
    for name in ("num_envs", "k", "max_turns", "categories_per_step", "memory_capacity"):
      value = getattr(self, name)
      require(is_int(value) and value >= 1, field_path(name), value, "an int >= 1")
    require(is_int(self.group_size) and self.group_size >= 2, field_path("group_size"),
            self.group_size, "an int >= 2 (group-relative advantages need two episodes per arm)")
    require(is_int(self.memory_sample_size) and self.memory_sample_size >= 0,
            field_path("memory_sample_size"), self.memory_sample_size, "an int >= 0")
    require(len(self.skills) >= 1 and len(set(self.skills)) == len(self.skills)
            and all(isinstance(s, str) and s for s in self.skills), field_path("skills"),
            self.skills, "a non-empty tuple of distinct category names")
    require(self.categories_per_step <= len(self.skills), field_path("categories_per_step"),
            self.categories_per_step, f"<= len(selfplay.skills)={len(self.skills)}")
    renamed = RENAMED_LIBRARIES.get(self.library)
    require(self.library in library_names(), field_path("library"), self.library,
            f"one of {library_names()}" + (f" (renamed: use {renamed!r})" if renamed else ""))
    held = get_library(self.library).settings
    require(self.setting in held, field_path("library"), self.library,
            f"a library of the setting {self.setting!r} (it holds {' and '.join(held)})")
    require(self.fixed_envs in FIXED_ENVS, field_path("fixed_envs"), self.fixed_envs,
            f"one of {FIXED_ENVS}")
    require(self.designer_advantage in DESIGNER_ADVANTAGES, field_path("designer_advantage"),
            self.designer_advantage, f"one of {tuple(DESIGNER_ADVANTAGES)}")
    for name in ("invalid_designer_reward", "validity_weight"):
      require(is_number(getattr(self, name)), field_path(name), getattr(self, name),
              "a finite number")
    require(self.validity_weight >= 0, field_path("validity_weight"), self.validity_weight,
            ">= 0")
    for name in ("action_format", "designer_reward"):
      require(isinstance(getattr(self, name), str), field_path(name), getattr(self, name),
              "a string")
    try:
      check_action_format(self.action_format)
      get_designer_reward(self.designer_reward)
    except ValueError as err:
      raise ConfigError(str(err)) from None
    require(self.designer_prompt in DESIGNER_PROMPTS, field_path("designer_prompt"),
            self.designer_prompt, f"one of {DESIGNER_PROMPTS}")
    designer_system_prompt(self.setting, self.designer_reward)  # the reward has prompt text
    for name in ("designer_sampling", "agent_sampling"):
      _check_sampling(field_path(name), getattr(self, name))

  @property
  def min_library_size(self) -> int:
    """The fewest library environments the run needs: a fixed-env baseline plays num_envs of
    them a step, as many environments as SPADE plays designs; SPADE needs none."""
    return self.num_envs if self.fixed_envs else 0

  def max_prompt_tokens(self, params: SamplingParams) -> int | None:
    """Longest prompt that leaves room for a whole reply in the engine's cache."""
    return None if self.max_cache_len is None else self.max_cache_len - params.max_new_tokens

  def batch_bounds(self, num_steps: int) -> BatchBounds:
    """The largest TrainBatch of a run of `num_steps` steps: the trainer compiles its step
    for it (rl/step_inputs.py), so it must hold every step's rows.

    Agent rows: G episodes of each of num_envs environments per trained arm. Designer rows:
    the num_envs designs of the refresh that falls due, and on the run's last step those of
    its own refresh too when that step refreshes (loop.py trains every pending design then).
    A row is at most the engine's cache long (loop batching ends agent rows at their last
    sampled token), with at most max_turns agent replies or one designer output of loss."""
    require(self.max_cache_len is not None, "engine.max_cache_len", None,
            "an int (it bounds the length of a training row)")
    arms = 2 if self.train_agent_on_hint_arm and not self.fixed_envs else 1
    windows = 2 if num_steps > 1 and (num_steps - 1) % self.k == 0 else 1
    designs = self.num_envs * windows if self.train_designer and not self.fixed_envs else 0
    loss = max(self.max_turns * self.agent_sampling.max_new_tokens,
               self.designer_sampling.max_new_tokens if designs else 0)
    return BatchBounds(agent_rows=self.num_envs * self.group_size * arms, designer_rows=designs,
                       length=self.max_cache_len, loss_tokens=min(loss, self.max_cache_len))

  @classmethod
  def from_config(cls, config: Any, *, max_cache_len: int | None = None) -> SelfPlayConfig:
    """Builds and checks the settings (`read_config`); the skills must be the setting's
    categories.

    `max_cache_len` is the engine's (derived: `Experiment` passes config.engine's)."""
    selfplay = cls(**read_config(config), max_cache_len=max_cache_len)
    known = SETTING_CATEGORIES[selfplay.setting]
    require(set(selfplay.skills) <= set(known), field_path("skills"), selfplay.skills,
            f"categories of the {selfplay.setting} setting, among {known}")
    return selfplay


def config_defaults() -> dict[str, Any]:
  """Every settable SelfPlayConfig field's default at its config path, as nested dicts:
  {"seed": 0, "setting": "games", "selfplay": {..., "memory": {...}}, "sampling": {...}}."""
  tree: dict[str, Any] = {}
  for f in settable_fields(SelfPlayConfig):
    *parents, leaf = field_path(f.name).split(".")
    node = tree
    for name in parents:
      node = node.setdefault(name, {})
    node[leaf] = sampling_config(f.default) if isinstance(f.default, SamplingParams) else f.default
  return tree


def read_config(config: Any) -> dict[str, Any]:
  """{field: value} of each settable SelfPlayConfig field that `config` (a ConfigDict or
  nested mappings) holds at its path: sequences as tuples, flags as bools, each role's
  sampling as SamplingParams. A key under config.selfplay or config.sampling that is no
  field's raises ConfigError naming it."""
  fields = settable_fields(SelfPlayConfig)
  paths = {field_path(f.name) for f in fields}
  unknown = [p for section in ("selfplay", "sampling") if section in config
             for p in _unknown_paths(config[section], section, paths)]
  if unknown:
    raise ConfigError(f"unknown config field(s) {unknown}; known: {sorted(paths)}")
  values = {}
  for f in fields:
    found, value = _lookup(config, field_path(f.name))
    if not found:
      continue
    if isinstance(f.default, SamplingParams):
      value = sampling_params(value, field_path(f.name).removeprefix("sampling."))
    elif isinstance(f.default, bool):
      value = bool(value)
    elif isinstance(f.default, tuple):
      value = tuple(value)
    values[f.name] = value
  return values


def _lookup(config: Any, path: str) -> tuple[bool, Any]:
  """(True, the value at the dotted `path`) or (False, None) when a key is missing."""
  node = config
  for name in path.split("."):
    if not hasattr(node, "keys") or name not in node:
      return False, None
    node = node[name]
  return True, node


def _unknown_paths(node: Any, path: str, known: set[str]) -> list[str]:
  """The dotted paths under `node` (at `path`) that are not in `known` nor above one."""
  if path in known:
    return []
  if not hasattr(node, "keys"):
    return [path]
  return [p for name in node.keys() for p in _unknown_paths(node[name], f"{path}.{name}", known)]


def sampling_config(params: SamplingParams) -> dict[str, Any]:
  """The config.sampling.<role> dict of `params` (the inverse of `sampling_params`)."""
  return {"max_new_tokens": params.max_new_tokens, "temperature": params.temperature,
          "top_p": params.top_p, "top_k": params.top_k}


def sampling_params(values: Mapping[str, Any] | Any, role: str) -> SamplingParams:
  """SamplingParams from config.sampling.<role> (max_new_tokens, temperature, top_p, top_k)."""
  get = values.get  # dict or ConfigDict
  unknown = sorted(set(values.keys()) - {"max_new_tokens", "temperature", "top_p", "top_k"})
  require(not unknown, f"sampling.{role}", dict(values), "only the keys max_new_tokens, "
          f"temperature, top_p and top_k (unknown: {unknown})")
  require(get("max_new_tokens") is not None, f"sampling.{role}.max_new_tokens", None,
          "an int > 0 (required)")
  defaults = SamplingParams(max_new_tokens=1)
  params = SamplingParams(max_new_tokens=get("max_new_tokens"),
                          temperature=get("temperature", defaults.temperature),
                          top_p=get("top_p", defaults.top_p), top_k=get("top_k", defaults.top_k))
  _check_sampling(f"sampling.{role}", params)
  return params


def _check_sampling(field: str, s: SamplingParams) -> None:
  require(is_int(s.max_new_tokens) and s.max_new_tokens > 0, f"{field}.max_new_tokens",
          s.max_new_tokens, "an int > 0")
  require(is_number(s.temperature) and s.temperature > 0, f"{field}.temperature",
          s.temperature, "> 0 (GRPO needs sampled log-probs, so no greedy rollouts)")
  require(is_number(s.top_p) and 0 < s.top_p <= 1, f"{field}.top_p", s.top_p, "in (0, 1]")
  require(is_int(s.top_k) and s.top_k >= 0, f"{field}.top_k", s.top_k, "an int >= 0")

