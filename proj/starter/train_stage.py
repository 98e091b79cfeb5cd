"""One resumable supervised stage: the jitted `lm_step` over a batch plan, with checkpoints.

Kill it at any point and run it again: it restores the newest intact orbax checkpoint
(params, optimiser state, step; `rl.checkpoint.CheckpointManager`) and continues at that
step, whose batch the plan gives again (the data position is the step index). A progress bar
shows the step, loss, tokens a second and the ETA; every step appends a line to log.jsonl,
and a saved step's line the result of an optional probe of the model (the build's repeat test).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from tqdm import tqdm

from proj.starter.lm_step import compile_lm_step
from spade_jax.model.sharding import state_shardings
from spade_jax.rl.checkpoint import CheckpointManager, abstract_like
from spade_jax.rl.config import RLConfig
from spade_jax.rl.optim import make_optimizer


class Plan(Protocol):
  def batch(self, step: int) -> dict[str, np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class StageSettings:
  """How long and how fast one stage trains."""

  num_steps: int
  learning_rate: float
  warmup_steps: int = 10
  weight_decay: float = 0.1
  save_every: int = 20
  chunk: int = 128  # positions per log-softmax chunk

  def optimizer_config(self) -> RLConfig:
    """The trainer's optimiser settings: AdamW, warmup then cosine decay to 0, clip 1.0."""
    return RLConfig(learning_rate=self.learning_rate, warmup_steps=self.warmup_steps,
                    schedule="cosine", total_steps=max(self.num_steps, self.warmup_steps + 1),
                    weight_decay=self.weight_decay, adam_b2=0.95)


def train(name: str, model: nnx.Module, plan: Plan, settings: StageSettings,
          directory: str | pathlib.Path, mesh: Mesh | None = None, *, progress: bool = True,
          deadline: float | None = None,
          probe: Callable[[nnx.Module], dict[str, Any]] | None = None) -> dict[str, Any]:
  """Trains `model` in place for the stage's steps (from its last checkpoint); a summary.

  `deadline` (time.time()) stops the stage early at a saved step; the summary says so.
  `probe(model)` runs at each saved step; its result is that step's "probe" in log.jsonl.
  """
  directory = pathlib.Path(directory)
  checkpoints = CheckpointManager(directory / "checkpoints", save_every=settings.save_every,
                                  keep=2, model_config=model.cfg)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  if mesh is not None:
    params = jax.device_put(params, state_shardings(params, mesh))
  tx = make_optimizer(settings.optimizer_config())
  step_fn, init_fn, batch_sharding = compile_lm_step(graphdef, tx, mesh, params, rest,
                                                     chunk=settings.chunk)
  opt_state = init_fn(params)
  start = 0
  restored = checkpoints.restore_latest(abstract_like(params), abstract_like(opt_state))
  if restored is not None:
    params, opt_state, start = restored.params, restored.opt_state, restored.step
  log = (directory / "log.jsonl").open("a", encoding="utf-8")
  losses, tokens, seconds, stopped_early = [], 0, 0.0, False
  bar = tqdm(total=settings.num_steps, initial=start, desc=name, unit="step", file=sys.stderr,
             disable=not progress, dynamic_ncols=True)
  try:
    for step in range(start, settings.num_steps):
      arrays = plan.batch(step)
      count = int(np.count_nonzero(arrays["weights"]))
      began = time.perf_counter()
      arrays = jax.device_put(arrays, batch_sharding) if batch_sharding is not None else arrays
      params, opt_state, metrics = step_fn(params, opt_state, rest, arrays)
      metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
      elapsed = time.perf_counter() - began
      if step > start:  # the first step of a run includes compilation
        tokens, seconds = tokens + count, seconds + elapsed
      losses.append(metrics["loss"])
      last = step + 1 == settings.num_steps
      late = deadline is not None and time.time() > deadline
      saved = checkpoints.save(step + 1, params, opt_state, None, {"tokens": count},
                               force=last or late)
      row = {"step": step + 1, **metrics, "tokens": count, "s": elapsed}
      if saved and probe is not None:
        nnx.update(model, params)
        row["probe"] = probe(model)
      log.write(json.dumps(row) + "\n")
      log.flush()
      bar.update(1)
      bar.set_postfix(loss=f"{metrics['loss']:.3f}", tok_s=f"{tokens / max(seconds, 1e-9):.0f}")
      if late and not last:
        stopped_early = True
        break
  finally:
    bar.close()
    log.close()
    checkpoints.close()
  nnx.update(model, params)
  return {"stage": name, "steps": settings.num_steps, "resumed_at": start,
          "stopped_early": stopped_early, "first_loss": losses[0] if losses else None,
          "last_loss": losses[-1] if losses else None,
          "tokens_per_s": round(tokens / seconds, 1) if seconds else None}
