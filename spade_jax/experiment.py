"""The typed experiment: every config section as one frozen struct, built and checked once.

`Experiment.from_config(config)` turns the ConfigDict of a configs/ module (after its
`--config.a.b=v` overrides) into frozen structs, one per section, each checking its own
fields, so a bad value fails at launch with one line naming it. Each struct holds its
section's defaults (`config_schema.base_config()` is built from them), and the fields that
one section derives from another are computed here, once:

* `rl.agent_temperature` and `rl.designer_temperature` are the roles' sampling temperatures
  (`config.sampling.<role>.temperature`): the trainer divides each row's logits by its
  role's, so its log-probs are those the row was sampled from;
* `selfplay.max_cache_len` is the engine's (`config.engine.max_cache_len`): prompts are cut
  so that a whole reply fits the cache.
* `rl.total_steps`, when unset, is `train.num_steps` (the schedule's horizon is the run);
* `rl.bounds` is the largest batch a step trains on (`SelfPlayConfig.batch_bounds`, from
  `config.selfplay`, `config.sampling`, the cache length and `train.num_steps`): the
  trainer's step compiles for it alone, without and with designer rows.

`spade_jax.config_schema.validate` builds it and checks the files the config names;
`spade_jax.run.run` takes it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from spade_jax.checks import from_section, is_int, require, require_int
from spade_jax.engine.config import EngineConfig
from spade_jax.eval.config import EvalConfig
from spade_jax.metrics.config import MetricsConfig
from spade_jax.model.policy_config import PolicyConfig
from spade_jax.model.sharding import MESH_AXES
from spade_jax.rl.config import RLConfig
from spade_jax.sandbox.config import SandboxConfig
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.corpus import CorpusConfig


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """`config.train`: how long the run is, how often it saves and logs."""

  num_steps: int = 400  # training steps (rollouts); the paper runs 400
  checkpoint_every: int = 16  # steps between checkpoints (the last step always saves)
  keep_checkpoints: int = 3  # newest checkpoints kept
  log_every: int = 1  # steps between TensorBoard writes
  num_text_summaries: int = 3  # environments shown as text each step
  # Persistent XLA compilation cache ("" = off): a resumed run skips recompiling the engine's
  # and the trainer's shapes. A relative path is under the workdir (gs:// too); an absolute,
  # ~ or gs:// path is shared by every run that names it.
  compilation_cache_dir: str = "xla_cache"

  def __post_init__(self):
    for name in ("num_steps", "checkpoint_every", "keep_checkpoints", "log_every"):
      require_int(getattr(self, name), f"train.{name}", 1)
    require_int(self.num_text_summaries, "train.num_text_summaries", 0)
    require(isinstance(self.compilation_cache_dir, str), "train.compilation_cache_dir",
            self.compilation_cache_dir, "a path or URL ('' = off)")


# config.<name> -> the struct of that section (selfplay spans seed, setting, selfplay and
# sampling; rl and selfplay carry derived fields).
SECTIONS: dict[str, type] = {
    "model": PolicyConfig, "engine": EngineConfig, "sandbox": SandboxConfig, "rl": RLConfig,
    "corpus": CorpusConfig, "metrics": MetricsConfig, "train": TrainConfig, "eval": EvalConfig}
DEFAULT_MESH = (("data", 1), ("fsdp", -1), ("tensor", 1), ("expert", 1))  # -1: the rest


@dataclasses.dataclass(frozen=True)
class Experiment:
  """A whole run's settings, checked: what `run()` builds every part from."""

  model: PolicyConfig
  selfplay: SelfPlayConfig  # also config.seed, config.setting and config.sampling
  engine: EngineConfig
  sandbox: SandboxConfig
  rl: RLConfig
  corpus: CorpusConfig
  metrics: MetricsConfig
  train: TrainConfig
  eval: EvalConfig
  tokenizer: str = "tiny"  # "tiny" (bundled SentencePiece) or a dir / hub id (tokenizer.json)
  mesh: tuple[tuple[str, int], ...] = DEFAULT_MESH  # (axis, size) pairs; -1 = the rest
  # The config as written (JSON), saved as <workdir>/config.json.
  source: str = dataclasses.field(default="{}", compare=False, repr=False)

  def __post_init__(self):
    require(isinstance(self.tokenizer, str) and self.tokenizer != "", "tokenizer",
            self.tokenizer, "'tiny' or a tokenizer dir / hub id")
    sizes = dict(self.mesh)
    require(set(sizes) <= set(MESH_AXES), "mesh", sizes, f"axes among {MESH_AXES}")
    require(all(is_int(v) and (v >= 1 or v == -1) for v in sizes.values())
            and list(sizes.values()).count(-1) <= 1, "mesh", sizes,
            "sizes >= 1 with at most one -1 (the remaining devices)")
    for field, temperature in _temperatures(self.selfplay).items():
      require(getattr(self.rl, field) == temperature, f"rl.{field}", getattr(self.rl, field),
              f"the rollouts' {temperature} (config.sampling)")
    require(self.selfplay.max_cache_len == self.engine.max_cache_len, "selfplay.max_cache_len",
            self.selfplay.max_cache_len, f"engine.max_cache_len={self.engine.max_cache_len}")
    bounds = self.selfplay.batch_bounds(self.train.num_steps)
    require(self.rl.bounds == bounds, "rl.bounds", self.rl.bounds,
            f"{bounds}, the self-play settings' (SelfPlayConfig.batch_bounds)")

  @property
  def seed(self) -> int:
    """config.seed: the root of every random choice, the model's init included."""
    return self.selfplay.seed

  @property
  def mesh_shape(self) -> dict[str, int]:
    return dict(self.mesh)

  @classmethod
  def from_config(cls, config: Any) -> Experiment:
    """Every section's struct from `config` (a ConfigDict), the derived fields computed;
    raises ConfigError naming the first bad field."""
    engine = from_section(EngineConfig, config.engine, "engine")
    selfplay = SelfPlayConfig.from_config(config, max_cache_len=engine.max_cache_len)
    mesh = config.mesh.to_dict() if hasattr(config.mesh, "to_dict") else dict(config.mesh)
    source = (config.to_json_best_effort(indent=1, sort_keys=True)
              if hasattr(config, "to_json_best_effort")
              else json.dumps(config, indent=1, sort_keys=True, default=str))
    train = from_section(TrainConfig, config.train, "train")
    return cls(model=from_section(PolicyConfig, config.model, "model"), selfplay=selfplay,
               engine=engine, sandbox=from_section(SandboxConfig, config.sandbox, "sandbox"),
               rl=RLConfig.from_config(config.rl, num_steps=train.num_steps,
                                       **_temperatures(selfplay),
                                       bounds=selfplay.batch_bounds(train.num_steps)),
               corpus=CorpusConfig.from_config(config.corpus),
               metrics=MetricsConfig.from_config(config), train=train,
               eval=EvalConfig.from_config(config), tokenizer=config.tokenizer,
               mesh=tuple(sorted(mesh.items(), key=_axis_order)), source=source)


def _temperatures(selfplay: SelfPlayConfig) -> dict[str, float]:
  """RLConfig's derived {<role>_temperature: config.sampling.<role>.temperature}."""
  return {f"{role}_temperature": getattr(selfplay, f"{role}_sampling").temperature
          for role in ("agent", "designer")}


def _axis_order(item: tuple[str, int]) -> tuple[int, str]:
  """(axis, size) pairs in MESH_AXES order; unknown axes (refused) last."""
  axis = item[0]
  return (MESH_AXES.index(axis) if axis in MESH_AXES else len(MESH_AXES), axis)
