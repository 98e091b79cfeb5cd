"""GRPO trainer settings: one frozen struct read from `config.rl`, checked once at start.

`RLConfig.from_config(config.rl, num_steps=..., **derived_values)` accepts an
`ml_collections.ConfigDict` or a plain mapping. Missing fields take the defaults below;
unknown fields and bad values raise a `ConfigError` naming the field, so a typo in a launch
override fails before anything compiles. `total_steps` left unset is the run's length
(`train.num_steps`, which the experiment passes as `num_steps`). `agent_temperature` and
`designer_temperature` (each role's sampling temperature) and `bounds` (the largest batch
of the run) are derived: the experiment (`spade_jax.experiment.Experiment`) passes them,
config.rl does not hold them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from spade_jax.checks import derived, from_section, is_int, is_number, require, section_defaults
from spade_jax.rl.advantages import ADVANTAGE_ESTIMATORS
from spade_jax.rl.aggregation import AGGREGATIONS
from spade_jax.rl.batch import BatchBounds
from spade_jax.rl.kl import KL_ESTIMATORS

SCHEDULES = ("constant", "cosine")
LOGPROB_POSITIONS = ("loss", "all")


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """Optimiser, GRPO loss and batching settings of the trainer."""

  # Optimiser: AdamW with linear warmup, then cosine decay to 0 at total_steps or constant.
  learning_rate: float = 1e-6
  warmup_steps: int = 0
  schedule: str = "constant"
  # Decay horizon of the cosine schedule. None (unset): the run's train.num_steps, filled in
  # when the experiment is built; set it for another horizon.
  total_steps: int | None = None
  weight_decay: float = 0.0
  grad_clip_norm: float = 1.0  # 0 disables clipping
  adam_b1: float = 0.9
  adam_b2: float = 0.999
  adam_eps: float = 1e-8
  # Loss: clipped importance ratio (clip-higher) plus beta * KL to the frozen reference.
  beta: float = 0.0  # 0 = no reference model, no reference forward
  kl_estimator: str = "k3"
  clip_low: float = 0.2  # ratio lower bound 1 - clip_low
  clip_high: float = 0.28  # ratio upper bound 1 + clip_high
  loss_agg: str = "token_mean"
  # Role balance: the aggregation runs within each role and the designer's rows get
  # designer_loss_share of the loss weight (aggregation.role_balanced); off = one pool.
  role_balance: bool = False
  designer_loss_share: float = 0.2
  # Rollout/train mismatch: truncated importance sampling. > 0: the clipped ratio is taken
  # against the trainer's own (proximal) log-probs and each token's loss is weighted by
  # min(pi_proximal / pi_behaviour, tis_cap), detached (docs/rl.md); 0 = off.
  tis_cap: float = 0.0
  # Advantages: normalised within each (role, group); then scaled by the role's weight.
  adv_estimator: str = "grpo"
  adv_std_bessel: bool = False
  adv_eps: float = 1e-6
  agent_weight: float = 1.0
  designer_weight: float = 1.0
  # Batching and numerics.
  micro_batch_size: int = 0  # rows per gradient-accumulation micro-batch; 0 = whole batch
  logprob_chunk: int = 64  # sequence positions per log-softmax chunk (bounds [B, C, V])
  # "loss": logits only at loss positions (step_inputs.loss_positions); "all": every position.
  logprob_positions: str = "loss"
  logprob_remat: bool = False  # recompute chunk logits in the backward: no [B, T, V] kept
  # Each role's sampling temperature: the step divides a row's logits by its role's, so its
  # log-probs are those of the distribution the row was sampled from. Not config.rl fields:
  # the experiment derives them from config.sampling.
  agent_temperature: float = derived(1.0, "sampling.agent.temperature")
  designer_temperature: float = derived(1.0, "sampling.designer.temperature")
  # The largest batch of the run (SelfPlayConfig.batch_bounds): every batch pads to it, so the
  # step compiles at most twice (rl/step_inputs.py). None (a Trainer built on its own, e.g.
  # in tests): each batch's own size sets its shape.
  bounds: BatchBounds | None = derived(
      None, "selfplay, sampling, engine.max_cache_len and train.num_steps")

  def __post_init__(self):
    for name, options in (("schedule", SCHEDULES), ("kl_estimator", tuple(KL_ESTIMATORS)),
                          ("loss_agg", tuple(AGGREGATIONS)),
                          ("logprob_positions", LOGPROB_POSITIONS),
                          ("adv_estimator", tuple(ADVANTAGE_ESTIMATORS))):
      _check(getattr(self, name) in options, name, f"one of {options}", getattr(self, name))
    _check(self.learning_rate > 0, "learning_rate", "> 0", self.learning_rate)
    _check(self.warmup_steps >= 0, "warmup_steps", ">= 0", self.warmup_steps)
    if self.total_steps is not None or self.schedule == "cosine":
      _check(is_int(self.total_steps) and self.total_steps > 0, "total_steps",
             "an int > 0 (the cosine schedule's horizon; unset, a run takes train.num_steps)",
             self.total_steps)
    if self.schedule == "cosine":
      _check(self.total_steps > self.warmup_steps, "total_steps", "> warmup_steps for cosine",
             self.total_steps)
    for name in ("weight_decay", "grad_clip_norm", "beta", "clip_high", "agent_weight",
                 "designer_weight", "tis_cap"):
      _check(getattr(self, name) >= 0, name, ">= 0", getattr(self, name))
    _check(0 <= self.clip_low < 1, "clip_low", "in [0, 1)", self.clip_low)
    _check(0 <= self.designer_loss_share <= 1, "designer_loss_share", "in [0, 1]",
           self.designer_loss_share)
    _check(self.adv_eps > 0, "adv_eps", "> 0", self.adv_eps)
    _check(self.micro_batch_size >= 0, "micro_batch_size", ">= 0 (0 = whole batch)",
           self.micro_batch_size)
    _check(self.logprob_chunk > 0, "logprob_chunk", "> 0", self.logprob_chunk)
    for name in ("agent_temperature", "designer_temperature"):
      _check(getattr(self, name) > 0, name, "> 0 (greedy rollouts have no log-probs)",
             getattr(self, name))
    for name in ("adam_b1", "adam_b2"):
      _check(0 <= getattr(self, name) < 1, name, "in [0, 1)", getattr(self, name))
    _check(self.adam_eps > 0, "adam_eps", "> 0", self.adam_eps)

  @classmethod
  def from_config(cls, rl: Mapping[str, Any] | Any, *, num_steps: int | None = None,
                  **derived_values: Any) -> RLConfig:
    """Builds the struct from `config.rl` (ConfigDict or mapping) and the derived fields
    (the roles' temperatures, the run's batch bounds); unknown keys raise, a derived one
    naming where it comes from. Integral floats of int fields become ints. `num_steps` (the
    run's train.num_steps) is the horizon when total_steps is unset."""
    values = dict(rl.to_dict() if hasattr(rl, "to_dict") else rl)
    if values.get("total_steps") is None and num_steps is not None:
      values["total_steps"] = num_steps
    defaults = section_defaults(cls)
    typed = {name: _typed(name, value, defaults[name]) if name in defaults else value
             for name, value in values.items()}
    return from_section(cls, typed, "rl", **derived_values)


def _typed(name: str, value: Any, default: Any) -> Any:
  """`value` of config.rl.<name> checked against its default's type; an integral float of an
  int field becomes an int."""
  if isinstance(default, bool):
    require(isinstance(value, bool), f"rl.{name}", value, "a bool")
  elif isinstance(default, (int, float)):
    require(is_number(value), f"rl.{name}", value, "a number")
    if isinstance(default, int):
      require(value == int(value), f"rl.{name}", value, "an integer")
    value = type(default)(value)
  return value


def _check(ok: bool, name: str, expected: str, value: Any) -> None:
  require(ok and (not isinstance(value, float) or is_number(value)), f"rl.{name}", value,
          expected)
