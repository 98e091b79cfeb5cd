"""Orbax checkpoints of the trainer: params, optimiser state, step, RNG and host state.

Layout under <workdir>/checkpoints/:
  model_config.json            the ModelConfig, so `spade_jax.model.load` can rebuild the model
  <step>/params/               orbax StandardSave of the parameter state (float32)
  <step>/opt_state/            orbax StandardSave of the optimiser state
  <step>/meta/                 JSON: {"step", "rng" (raw key data), "host_state",
                               "host_state_sha256", "checksums": {item: {array: [2 x u32]}}}
Saving is asynchronous (the arrays are copied off the device before `save` returns, so
the next donated update cannot clobber them); a step directory appears only once it is
complete (orbax writes to a temporary name and renames it), so a save cut short by a crash
is never a step. Every restore is verified before anything uses it (model/integrity.py):
the files the OCDBT b-tree references exist and are long enough, every array's checksum
equals the one recorded at save, every float is finite, and the host state hashes to its
recorded digest. `restore_latest` walks the steps from newest to oldest: a checkpoint that
fails is skipped for the next older one; once one restores, each skipped one is reported
(a warning naming the checkpoint, the array and its file, and the step the run goes on
from) and renamed `<step>.corrupt`; when none restores, `CheckpointIntegrityError` lists
every reason (one line) and nothing is moved. On several
processes every one of them takes the same decision for each step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from spade_jax import storage
from spade_jax.model import integrity
from spade_jax.model.config import ModelConfig
from spade_jax.model.integrity import CheckpointIntegrityError
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
    self.directory = storage.makedirs(directory)  # a local path or gs://
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
    meta["host_state_sha256"] = _digest(meta["host_state"])
    meta["checksums"] = {PARAMS_ITEM: integrity.checksums(params),
                         "opt_state": integrity.checksums(opt_state)}
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
    with _QuietAbandonedReads() as quiet:
      return self._restore_newest(abstract_params, abstract_opt_state, quarantine, quiet)

  def _restore_newest(self, abstract_params: Any, abstract_opt_state: Any | None,
                      quarantine: bool, quiet: _QuietAbandonedReads) -> Restored | None:
    failed: list[tuple[int, str]] = []
    for step in sorted(self._mgr.all_steps(), reverse=True):
      where = self.directory / str(step)
      restored, error = None, ""
      try:  # this process's files and arrays
        read = self._read(step, abstract_params, abstract_opt_state)
      except Exception as e:  # noqa: BLE001 - any failure to read means this step is unusable
        error = str(e) if isinstance(e, CheckpointIntegrityError) else (
            f"{where}: {type(e).__name__}: {e}")
      if not _everywhere(not error):  # before the checksums, a computation over every process
        error = error or f"{where}: failed to restore on another process"
      else:
        try:
          restored = self._verified(step, *read)
        except CheckpointIntegrityError as e:  # the same verdict on every process
          error = str(e)
      if restored is not None:
        for bad, why in failed:  # one line each: the checkpoint, the array / file, the step
          warnings.warn(f"checkpoint {self.directory / str(bad)} is not usable: {why}; going "
                        f"on from step {step}", RuntimeWarning, stacklevel=3)
          if quarantine:
            self._quarantine(bad)
        return restored
      failed.append((step, error))
      quiet.keep = True  # the failed read's stragglers may still come
    if failed:
      raise CheckpointIntegrityError(
          f"no intact checkpoint in {self.directory} (nothing was moved): "
          + " | ".join(f"step {step}: {error}" for step, error in failed))
    return None

  def _read(self, step: int, abstract_params: Any, abstract_opt_state: Any | None,
            ) -> tuple[dict, dict, dict]:
    """(meta, restored items, their data files) of one step: meta and host-state digest
    checked, every referenced file present and long enough, then orbax's restore."""
    where = self.directory / str(step)
    meta = self._mgr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    if not isinstance(meta, dict) or meta.get("step") != step or "checksums" not in meta:
      raise CheckpointIntegrityError(f"{where}/meta: inconsistent or without checksums: "
                                     f"{str(meta)[:200]}")
    if _digest(meta.get("host_state")) != meta.get("host_state_sha256"):
      raise CheckpointIntegrityError(f"{where}/meta: host state does not match its digest")
    targets = {PARAMS_ITEM: abstract_params}
    if abstract_opt_state is not None:
      targets["opt_state"] = abstract_opt_state
    files = {item: integrity.data_files(where / item) for item in targets}
    try:
      out = self._mgr.restore(step, args=ocp.args.Composite(
          **{item: ocp.args.StandardRestore(t) for item, t in targets.items()}))
    except Exception as e:  # noqa: BLE001 - name the checkpoint whatever orbax raised
      raise CheckpointIntegrityError(f"{where}: {integrity.read_error(e, files)}") from None
    return meta, {item: out[item] for item in targets}, files

  def _verified(self, step: int, meta: dict, items: dict, files: dict) -> Restored:
    """The step once every array matches its saved checksums and is finite."""
    where = self.directory / str(step)
    for item, tree in items.items():
      integrity.verify(tree, meta["checksums"][item], f"{where}/{item}", files[item])
    rng = None if meta.get("rng") is None else np.asarray(meta["rng"], np.uint32)
    return Restored(step=step, params=items[PARAMS_ITEM], opt_state=items.get("opt_state"),
                    rng=rng, host_state=meta.get("host_state", {}))

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


def _digest(host_state: Any) -> str:
  return hashlib.sha256(json.dumps(host_state, sort_keys=True).encode()).hexdigest()


class _QuietAbandonedReads:
  """While orbax restores (and for good after a restore failed, already reported), drops
  the debris of a failed read: orbax's other array reads still finish on tensorstore's
  threads into the event loop orbax has closed, each printing a traceback ('Event loop is
  closed', or the same read error with a TensorStore spec dump) through `sys.excepthook`
  or `sys.unraisablehook`. Every other exception still prints."""

  def __enter__(self) -> _QuietAbandonedReads:
    self.keep = False
    self._hooks = sys.excepthook, sys.unraisablehook
    previous_except, previous_unraisable = self._hooks
    sys.excepthook = lambda t, v, tb: None if _abandoned(v) else previous_except(t, v, tb)
    sys.unraisablehook = lambda u: None if _abandoned(u.exc_value) else previous_unraisable(u)
    return self

  def __exit__(self, *exc) -> None:
    if not self.keep:
      sys.excepthook, sys.unraisablehook = self._hooks


def _abandoned(err: BaseException | None) -> bool:
  text = str(err)
  return (isinstance(err, RuntimeError) and text == "Event loop is closed") or text.startswith(
      _ABANDONED_READ)


_ABANDONED_READ = "Encountered error while reading array index"  # orbax's message


def _everywhere(ok: bool) -> bool:
  """True when `ok` holds on every process (each must take the same restore decision)."""
  if jax.process_count() == 1:
    return ok
  return bool(np.all(multihost_utils.process_allgather(np.asarray(ok, np.int32))))
