"""The trainer's optimiser: global-norm clipping, then AdamW on a warmup + decay schedule.

Weight decay applies to matrices only (ndim >= 2); norm scales are not decayed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spade_jax.model.sharding import batch_sharding
from spade_jax.rl.config import RLConfig


def learning_rate_schedule(cfg: RLConfig) -> optax.Schedule:
  """Linear warmup from 0 over warmup_steps, then constant or cosine decay to 0."""
  if cfg.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.total_steps, end_value=0.0)
  if cfg.warmup_steps == 0:
    return optax.constant_schedule(cfg.learning_rate)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps),
       optax.constant_schedule(cfg.learning_rate)], [cfg.warmup_steps])


def make_optimizer(cfg: RLConfig) -> optax.GradientTransformation:
  """clip_by_global_norm (when grad_clip_norm > 0) followed by AdamW."""
  adamw = optax.adamw(learning_rate_schedule(cfg), b1=cfg.adam_b1, b2=cfg.adam_b2,
                      eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                      mask=lambda params: jax.tree.map(lambda x: x.ndim >= 2, params))
  if cfg.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip_norm), adamw)
  return adamw


class StepShardings(NamedTuple):
  """Where a jitted update's arguments live on a mesh."""
  replicated: NamedSharding
  batch: NamedSharding  # [M, mb, ...] arrays: micro-batch rows as LOGICAL_RULES["batch"] says
  params: Any  # each parameter's own sharding
  opt_state: Any  # each moment like its parameter; counters replicated


def step_shardings(tx: optax.GradientTransformation, mesh: Mesh, params) -> StepShardings:
  """The shardings of a train step's parameters, optimiser state and batch on `mesh`."""
  replicated = NamedSharding(mesh, PartitionSpec())
  param_sh = jax.tree.map(lambda x: x.sharding, params)
  opt_sh = optax.tree_map_params(tx, lambda _, sh: sh, jax.eval_shape(tx.init, params), param_sh,
                                 transform_non_params=lambda _: replicated)
  return StepShardings(replicated, batch_sharding(mesh, leading=1), param_sh, opt_sh)
