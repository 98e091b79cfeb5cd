"""Orbax checkpoints of the trainer: params, optimiser state, step, RNG and host state.

Layout under <workdir>/checkpoints/:
  model_config.json            the ModelConfig, so `spade_jax.model.load` can rebuild the model
  <step>/params/               orbax StandardSave of the parameter state (float32)
  <step>/opt_state/            orbax StandardSave of the optimiser state
  <step>/meta/                 JSON: {"step", "rng" (raw key data), "host_state"}
Saving is asynchronous (the arrays are copied off the device before `save` returns, so
the next donated update cannot clobber them); a step directory appears only once it is
complete (orbax writes to a temporary name and renames it). `restore_latest` walks the
steps from newest to oldest: a checkpoint that fails to restore is renamed
`<step>.corrupt` with a warning, and the next older one is tried.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from spade_jax.model.config import ModelConfig
from spade_jax.model.load import PARAMS_ITEM, write_model_config


@dataclasses.dataclass
class Restored:
  step: int
  params: Any
  opt_state: Any | None
  rng: np.ndarray | None  # raw key data (jax.random.key_data)
  host_state: dict


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
    self.directory = Path(directory).absolute()
    self.directory.mkdir(parents=True, exist_ok=True)
    if model_config is not None:
      write_model_config(self.directory, model_config)
    self._mgr = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True,
            enable_async_checkpointing=async_save))

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
    host_state = dict(host_state or {})
    try:
      meta = json.loads(json.dumps({
          "step": int(step), "host_state": host_state,
          "rng": None if rng is None else np.asarray(rng).tolist()}))
    except TypeError as e:
      raise TypeError(f"host_state for checkpoint step {step} is not JSON-serialisable: {e}"
                      ) from e
    args = ocp.args.Composite(**{PARAMS_ITEM: ocp.args.StandardSave(params)},
                              opt_state=ocp.args.StandardSave(opt_state),
                              meta=ocp.args.JsonSave(meta))
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
    steps = sorted(self._mgr.all_steps(), reverse=True)
    errors = []
    for step in steps:
      try:
        return self._restore(step, abstract_params, abstract_opt_state)
      except Exception as e:  # noqa: BLE001 - any failure to read means this step is unusable
        errors.append(f"step {step}: {type(e).__name__}: {e}")
        moved = f"moving it to {step}.corrupt and " if quarantine else ""
        warnings.warn(f"checkpoint {self.directory / str(step)} could not be restored "
                      f"({type(e).__name__}: {e}); {moved}trying the previous one",
                      RuntimeWarning, stacklevel=2)
        if quarantine:
          self._quarantine(step)
    if errors:
      raise RuntimeError(f"no checkpoint in {self.directory} could be restored: {errors}")
    return None

  def _restore(self, step: int, abstract_params: Any, abstract_opt_state: Any | None,
               ) -> Restored:
    items = {PARAMS_ITEM: ocp.args.StandardRestore(abstract_params),
             "meta": ocp.args.JsonRestore()}
    if abstract_opt_state is not None:
      items["opt_state"] = ocp.args.StandardRestore(abstract_opt_state)
    out = self._mgr.restore(step, args=ocp.args.Composite(**items))
    meta = out["meta"]
    if not isinstance(meta, dict) or meta.get("step") != step:
      raise ValueError(f"meta of step {step} is inconsistent: {meta!r}")
    rng = None if meta.get("rng") is None else np.asarray(meta["rng"], np.uint32)
    return Restored(step=step, params=out[PARAMS_ITEM],
                    opt_state=out["opt_state"] if abstract_opt_state is not None else None,
                    rng=rng, host_state=meta.get("host_state", {}))

  def _quarantine(self, step: int) -> None:
    src = self.directory / str(step)
    dst = self.directory / f"{step}.corrupt"
    if src.exists() and jax.process_index() == 0:
      if dst.exists():
        raise RuntimeError(f"cannot quarantine {src}: {dst} already exists")
      os.replace(src, dst)
    self._mgr.reload()

  def wait_until_finished(self) -> None:
    self._mgr.wait_until_finished()

  def close(self) -> None:
    self._mgr.wait_until_finished()
    self._mgr.close()
