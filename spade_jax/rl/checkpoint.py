"""Orbax checkpoints of the trainer: periodic async saves, keep-last-K, resume with fallback.

The format (item names, the meta with its checksums, model_config.json, the verified reader)
is `spade_jax.model.checkpoint_format`; this manager is its one writer. Saving is
asynchronous (the arrays are copied off the device before `save` returns, so the next
donated update cannot clobber them); a step directory appears only once it is complete
(orbax writes to a temporary name and renames it), so a save cut short by a crash is never a
step. `restore_latest` walks the steps from newest to oldest through
`checkpoint_format.restore_newest`: a checkpoint that fails verification is skipped for the
next older one; once one restores, each skipped one is reported (a warning naming the
checkpoint, the array and its file, and the step the run goes on from) and renamed
`<step>.corrupt`; when none restores, `CheckpointIntegrityError` lists every reason (one
line) and nothing is moved.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from spade_jax import storage
from spade_jax.model import checkpoint_format
from spade_jax.model.checkpoint_format import Restored
from spade_jax.model.config import ModelConfig


def abstract_like(tree: Any) -> Any:
  """ShapeDtypeStructs with the shardings of a live pytree: the restore target."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
      tree)


class CheckpointManager:
  """Periodic async saves, keep-last-K, newest-restorable restore with fallback."""

  def __init__(self, directory: str | os.PathLike, *, save_every: int = 1, keep: int = 3,
               model_config: ModelConfig | None = None, async_save: bool = True):
    if save_every < 1 or keep < 1:
      raise ValueError(f"checkpoint save_every={save_every} and keep={keep} must be >= 1")
    self.save_every = save_every
    self.directory = storage.makedirs(directory)  # a local path or gs://
    if model_config is not None:
      self.write_model_config(model_config)
    self._mgr = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True,
            enable_async_checkpointing=async_save))

  def write_model_config(self, cfg: ModelConfig) -> None:
    """Records the architecture beside the steps, so `load_model` can open every one."""
    checkpoint_format.write_model_config(self.directory, cfg)

  def all_steps(self) -> list[int]:
    return sorted(self._mgr.all_steps())

  def should_save(self, step: int) -> bool:
    """Every `save_every` steps (step % save_every == 0), never step 0."""
    return step > 0 and step % self.save_every == 0

  def save(self, step: int, params: Any, opt_state: Any, rng: np.ndarray | None,
           host_state: dict | None = None, *, force: bool = False) -> bool:
    """Starts saving `step` if the interval says so (or `force`); True if it started."""
    if not (force or self.should_save(step)):
      return False
    args = checkpoint_format.save_args(step, params, opt_state, rng, dict(host_state or {}))
    return self._mgr.save(int(step), args=args, force=True)

  def restore_latest(self, abstract_params: Any, abstract_opt_state: Any | None = None, *,
                     quarantine: bool = True) -> Restored | None:
    """Restores the newest checkpoint that loads, falling back past corrupt ones.

    Returns None when there is no checkpoint at all; raises if none of them loads.
    `abstract_opt_state=None` restores the parameters only (e.g. for inference), and
    `quarantine=False` leaves unreadable steps in place (a reader must not move a
    running trainer's files).
    """
    self._mgr.wait_until_finished()
    return checkpoint_format.restore_newest(
        self.directory, self._mgr.all_steps(), abstract_params, abstract_opt_state,
        quarantine=self._quarantine if quarantine else None)

  def _quarantine(self, step: int) -> None:
    src = self.directory / str(step)
    dst = self.directory / f"{step}.corrupt"
    if src.exists() and jax.process_index() == 0:
      if dst.exists():
        raise RuntimeError(f"cannot quarantine {src}: {dst} already exists")
      storage.rename(src, dst)
    if jax.process_count() > 1:  # the others must see the rename before they reload
      multihost_utils.sync_global_devices(f"spade_jax quarantine {step}")
    self._mgr.reload()

  def wait_until_finished(self) -> None:
    self._mgr.wait_until_finished()

  def close(self) -> None:
    self._mgr.wait_until_finished()
    self._mgr.close()
