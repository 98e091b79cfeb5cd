"""The GRPO Trainer: owns the policy's parameters, optimiser state and checkpoints.

    trainer = Trainer(rl_config, model, mesh)          # or Trainer.for_run(...) (run.py)
    metrics = trainer.train_step(batch)                # batch: rl.batch.TrainBatch
    engine.load_weights(trainer.params)                # before the next rollout

The jitted update lives in a `CompiledSteps` that the trainer owns, so it is freed with the
trainer; trainers handed the same `compiled=` (the tests of one module) compile each model
structure, RL config and mesh once between them.

`trainer.policy` is the model it was given: each step writes the new parameters back into
it (`nnx.update`). The update donates the old parameter buffers, so anything holding the
previous `trainer.params` must take the new ones before it uses them again; the engine
makes its own copy of them at `engine.load_weights(trainer.params)` (engine/weights.py).

The reference policy (only when beta > 0) is a frozen copy of the parameters the Trainer
was constructed with. To resume, build the same initial model (same checkpoint or seed)
and call `restore()`: it replaces the policy, optimiser state, step and RNG, while the
reference stays the initial model, exactly as in the uninterrupted run.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from spade_jax import storage
from spade_jax.model import lora, lora_io
from spade_jax.model.sharding import batch_shards, state_shardings
from spade_jax.rl.advantages import ROLE_NAMES, compute_advantages
from spade_jax.rl.aggregation import token_weights
from spade_jax.rl.batch import AGENT, DESIGNER, TrainBatch
from spade_jax.rl.checkpoint import CheckpointManager, abstract_like
from spade_jax.rl.config import RLConfig
from spade_jax.rl.optim import learning_rate_schedule, make_optimizer, step_shardings
from spade_jax.rl.step_inputs import prepare_batch
from spade_jax.rl.train_step import train_step


class Trainer:
  """GRPO updates of one policy; see the module docstring for the weight-sharing contract."""

  def __init__(self, rl: RLConfig | Any, model: nnx.Module, mesh: Mesh | None = None, *,
               seed: int = 0, checkpoints: CheckpointManager | None = None,
               compiled: CompiledSteps | None = None):
    self.cfg = rl if isinstance(rl, RLConfig) else RLConfig.from_config(rl)
    self.policy = model
    self.mesh = mesh
    self.checkpoints = checkpoints
    if checkpoints is not None:  # makes every checkpoint loadable by model.load_model
      checkpoints.write_model_config(model.cfg)
    self.updates = 0  # optimiser updates made: the checkpoints' step numbers
    self._rng = jax.random.key_data(jax.random.key(seed))
    self._schedule = learning_rate_schedule(self.cfg)
    # With LoRA only the adapters train; the frozen base weights travel in `_rest`.
    self._trainable = lora.trainable(model.cfg)
    self._base = lora.base_fingerprint(model) if model.cfg.lora_rank else None
    graphdef, params, self._rest = nnx.split(model, self._trainable, ...)
    self._dp = batch_shards(mesh)
    if mesh is not None:
      params = jax.device_put(params, state_shardings(params, mesh))
      self._rest = jax.device_put(self._rest, state_shardings(self._rest, mesh))
    else:
      self._device = _first_device(params)
      params, self._rest = self._placed(params), self._placed(self._rest)
    nnx.update(model, params)
    if self.cfg.micro_batch_size % self._dp:
      raise ValueError(f"config.rl.micro_batch_size={self.cfg.micro_batch_size} must be a "
                       f"multiple of the mesh's batch shards {self._dp}")
    # The KL reference: a frozen copy of the weights, or (LoRA) the base with adapters off.
    separate_ref = self.cfg.beta > 0 and not model.cfg.lora_rank
    self._compiled = CompiledSteps() if compiled is None else compiled
    self._fns = self._compiled.get(graphdef, self.cfg, mesh, params, self._rest, separate_ref)
    with self._mesh_ctx():
      self.opt_state = self._placed(self._fns.init(params))
      # The reference is a separate frozen copy (the policy's buffers are donated each step).
      self.ref_params = self._placed(self._fns.copy(params)) if separate_ref else None

  @classmethod
  def for_run(cls, rl: RLConfig, model: nnx.Module, mesh: Mesh | None,
              workdir: str | os.PathLike, *, seed: int, save_every: int, keep: int,
              checkpoint: str = "", preset: str = "") -> Trainer:
    """A trainer that checkpoints under <workdir>/checkpoints every `save_every` updates,
    keeping the newest `keep`. `rl` comes whole from the experiment (its temperatures are
    the roles' rollouts'); with LoRA, `checkpoint` / `preset` / `seed` record the frozen base
    that `load_model` rebuilds the adapters on."""
    checkpoints = CheckpointManager(storage.join(workdir, "checkpoints"), save_every=save_every,
                                    keep=keep)
    trainer = cls(rl, model, mesh, seed=seed, checkpoints=checkpoints)
    if model.cfg.lora_rank:  # what `load_model` rebuilds it on
      lora_io.write_base_record(checkpoints.directory, model, checkpoint=checkpoint,
                                preset=preset, seed=seed)
    return trainer

  @property
  def params(self) -> nnx.State:
    """The policy's current parameter state (live device buffers, no copy)."""
    return nnx.state(self.policy, nnx.Param)

  @property
  def trained_params(self) -> nnx.State:
    """The parameters the optimiser updates: all of them, or only the LoRA adapters."""
    return nnx.state(self.policy, self._trainable)

  def next_rng(self) -> jax.Array:
    """A fresh PRNG key for the caller (e.g. rollout seeds); the state is checkpointed."""
    key, sub = jax.random.split(jax.random.wrap_key_data(self._rng))
    self._rng = jax.random.key_data(key)
    return sub

  def train_step(self, batch: TrainBatch) -> dict[str, float]:
    """One GRPO update on `batch`; returns scalar metrics (loss, kl, clip_fraction, ...)."""
    arrays, stats = self._step_inputs(batch)
    with self._mesh_ctx():
      if self.mesh is not None:
        arrays = jax.device_put(arrays, self._fns.batch_sharding)
      params, self.opt_state, metrics = self._fns.step(
          self.trained_params, self.opt_state, self.ref_params, self._rest, arrays)
    nnx.update(self.policy, params)
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    for role in ROLE_NAMES.values():  # a role without rows this step reports nothing
      if metrics[f"{role}/loss_tokens"] == 0:
        metrics = {k: v for k, v in metrics.items() if not k.startswith(f"{role}/")}
    metrics["learning_rate"] = float(self._schedule(self.updates))
    self.updates += 1
    return {**metrics, **stats}

  def compiled_step(self, batch: TrainBatch) -> jax.stages.Compiled:
    """The update compiled for `batch`'s shapes and not run (e.g. for `.memory_analysis()`)."""
    arrays, _ = self._step_inputs(batch)
    with self._mesh_ctx():
      return self._fns.step.lower(self.trained_params, self.opt_state, self.ref_params, self._rest,
                                  arrays).compile()

  def _step_inputs(self, batch: TrainBatch) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The step's host arrays (advantages, weights, micro-batches) and advantage stats."""
    adv, stats = compute_advantages(
        batch.rewards, batch.group_ids, batch.roles, estimator=self.cfg.adv_estimator,
        bessel=self.cfg.adv_std_bessel, eps=self.cfg.adv_eps,
        role_weights={AGENT: self.cfg.agent_weight, DESIGNER: self.cfg.designer_weight},
        offsets=batch.advantage_offsets)
    weights = token_weights(batch.loss_mask, self.cfg.loss_agg, batch.roles,
                            self.cfg.designer_loss_share if self.cfg.role_balance else None)
    chunk = self.cfg.logprob_chunk if self.cfg.logprob_positions == "loss" else None
    arrays = prepare_batch(batch, adv, weights, micro_batch_size=self.cfg.micro_batch_size,
                           multiple_of=self._dp, vocab_size=self.policy.cfg.vocab_size,
                           chunk=chunk, bounds=self.cfg.bounds)
    return arrays, stats

  def maybe_save(self, host_state: dict | None = None, *, force: bool = False) -> bool:
    """Saves (async) at the current step if the interval says so; needs a manager."""
    if self.checkpoints is None:
      raise ValueError("Trainer has no CheckpointManager (pass checkpoints= or a workdir)")
    host_state = lora.tag_host_state(host_state, self._base)
    return self.checkpoints.save(self.updates, self.trained_params, self.opt_state, self._rng,
                                 host_state, force=force)

  def restore(self) -> dict | None:
    """Resumes from the newest restorable checkpoint; returns its host state (None: fresh)."""
    if self.checkpoints is None:
      raise ValueError("Trainer has no CheckpointManager (pass checkpoints= or a workdir)")
    restored = self.checkpoints.restore_latest(abstract_like(self.trained_params),
                                               abstract_like(self.opt_state))
    if restored is None:
      return None
    host_state = lora.check_host_state(restored.host_state, self._base,
                                       self.checkpoints.directory / str(restored.step))
    nnx.update(self.policy, self._placed(restored.params))
    self.opt_state = self._placed(restored.opt_state)
    self.updates = restored.step
    if restored.rng is not None:
      self._rng = jnp.asarray(restored.rng)
    return host_state

  def close(self) -> None:
    """Waits for pending checkpoint writes."""
    if self.checkpoints is not None:
      self.checkpoints.close()

  def _placed(self, tree: Any) -> Any:
    """Without a mesh, `tree` committed to the policy's device (with one, unchanged).

    The unsharded step is jitted without explicit shardings, so it compiles again whenever
    an argument's committed flag changes: e.g. parameters loaded with `device_put` beside
    an optimiser state built from constants made the second step compile a second time.
    """
    return tree if self.mesh is not None else jax.device_put(tree, self._device)

  def _mesh_ctx(self):
    return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()


class _Fns(NamedTuple):
  """The jitted functions of one (model structure, RL config, mesh)."""
  init: Callable  # params -> optimiser state
  copy: Callable  # params -> a separate copy (the reference)
  step: Callable  # train_step with params and opt_state donated
  batch_sharding: Any


class CompiledSteps:
  """The jitted functions of each (model structure, RL config, mesh) of the trainers that
  hold this object: each trainer's own by default, or one passed to several trainers so
  that each shared key compiles once."""

  def __init__(self):
    self._fns: dict[tuple, _Fns] = {}

  def get(self, graphdef, cfg: RLConfig, mesh: Mesh | None, params, rest,
          separate_ref: bool) -> _Fns:
    """The functions of (graphdef, cfg, mesh), jitted on the first request; each compiles
    on its first call (`separate_ref` follows from cfg.beta and the graph's LoRA rank, so it
    needs no place in the key)."""
    key = (graphdef, cfg, mesh)
    if key not in self._fns:
      self._fns[key] = compile_fns(graphdef, cfg, mesh, params, rest, separate_ref)
    return self._fns[key]


def _first_device(tree) -> jax.Device:
  return next(iter(jax.tree.leaves(tree)[0].devices()))


def compile_fns(graphdef, cfg: RLConfig, mesh: Mesh | None, params, rest,
                separate_ref: bool) -> _Fns:
  """The jitted init / copy / step of one (model structure, RL config, mesh); `params` and
  `rest` may be abstract (`jax.ShapeDtypeStruct`s with shardings: plan --compile)."""
  tx = make_optimizer(cfg)
  step_fn = functools.partial(train_step, graphdef=graphdef, tx=tx, cfg=cfg)
  copy = functools.partial(jax.tree.map, jnp.copy)
  if mesh is None:
    step = jax.jit(step_fn, donate_argnums=(0, 1))
    return _Fns(jax.jit(tx.init), jax.jit(copy), step, None)
  replicated, batch_sh, param_sh, opt_sh = step_shardings(tx, mesh, params)
  step = jax.jit(step_fn, donate_argnums=(0, 1),
                 in_shardings=(param_sh, opt_sh, param_sh if separate_ref else None,
                               jax.tree.map(lambda x: x.sharding, rest), batch_sh),
                 out_shardings=(param_sh, opt_sh, replicated))
  return _Fns(jax.jit(tx.init, out_shardings=opt_sh), jax.jit(copy, out_shardings=param_sh),
              step, batch_sh)
