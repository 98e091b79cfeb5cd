"""The trainer's checkpoint format: its names, what a save holds, and the one verified reader.

Layout of a checkpoints directory (<workdir>/checkpoints/):
  model_config.json   the ModelConfig, so `load_model` can rebuild the model
  <step>/params/      orbax StandardSave of the parameter state (PARAMS_ITEM)
  <step>/opt_state/   orbax StandardSave of the optimiser state (OPT_STATE_ITEM)
  <step>/meta/        JSON (META_ITEM): {"step", "rng" (raw key data), "host_state",
                      "host_state_sha256", "checksums": {item: {array: [2 x u32]}}}
The writer is `rl.checkpoint.CheckpointManager` (it saves `save_args` and writes the model
config); the readers are the manager (resume, with quarantine) and `model.load.load_model`
(parameters only, nothing moved). Both read through `read_step` / `restore_newest`, so a step
one of them accepts the other accepts too. A step is verified before anything uses it
(model/integrity.py): its meta parses and its host state hashes to the recorded digest, the
files the OCDBT b-tree references exist and are long enough, orbax restores, and every array
equals its saved checksums and is finite. On several processes every process takes the same
decision for each step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from spade_jax import storage
from spade_jax.model import integrity
from spade_jax.model.config import ModelConfig
from spade_jax.model.hf_config import CheckpointError
from spade_jax.model.integrity import CheckpointIntegrityError

MODEL_CONFIG_FILE = "model_config.json"
PARAMS_ITEM = "params"
OPT_STATE_ITEM = "opt_state"
META_ITEM = "meta"


@dataclasses.dataclass
class Restored:
  step: int
  params: Any
  opt_state: Any | None
  rng: np.ndarray | None  # raw key data (jax.random.key_data)
  host_state: dict


def write_model_config(directory: storage.PathLike, cfg: ModelConfig) -> None:
  """Writes <directory>/model_config.json atomically (`storage.write_text`).

  Every process of a multi-process run writes the same file: each through its own temporary
  name, so one's rename cannot take the other's temporary file away.
  """
  storage.write_text(storage.join(directory, MODEL_CONFIG_FILE),
                     json.dumps(dataclasses.asdict(cfg), indent=1, sort_keys=True))


def read_model_config(directory: storage.PathLike) -> ModelConfig:
  """The ModelConfig of a checkpoints directory; unknown fields fail by name."""
  path = storage.join(directory, MODEL_CONFIG_FILE)
  values = json.loads(storage.read_text(path))
  fields = {f.name for f in dataclasses.fields(ModelConfig)}
  unknown = sorted(set(values) - fields)
  if unknown:
    raise CheckpointError(f"{path}: unknown ModelConfig field(s) {unknown}")
  return ModelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def locate(path: storage.PathLike) -> tuple[storage.Path, int | None] | None:
  """(checkpoints directory, step or None for 'newest') when `path` is a trainer checkpoint
  (a workdir, its checkpoints/ directory or one step directory), else None."""
  where = storage.path(path)
  if not where.is_dir():
    return None
  for directory in (where, where / "checkpoints"):
    if (directory / MODEL_CONFIG_FILE).is_file():
      return directory, None
  if where.name.isdigit() and (where.parent / MODEL_CONFIG_FILE).is_file():
    return where.parent, int(where.name)
  return None


def steps(directory: storage.PathLike) -> list[int]:
  """The complete (finalized) steps of a checkpoints directory, ascending."""
  return sorted(ocp.utils.checkpoint_steps(storage.path(directory)))


def save_args(step: int, params: Any, opt_state: Any, rng: np.ndarray | None,
              host_state: dict) -> ocp.args.Composite:
  """What one step saves: both array trees and the meta that lets a reader verify them."""
  try:
    meta = json.loads(json.dumps({
        "step": int(step), "host_state": host_state,
        "rng": None if rng is None else np.asarray(rng).tolist()}))
  except TypeError as e:
    raise TypeError(f"host_state for checkpoint step {step} is not JSON-serialisable: {e}"
                    ) from e
  meta["host_state_sha256"] = _digest(meta["host_state"])
  meta["checksums"] = {PARAMS_ITEM: integrity.checksums(params),
                       OPT_STATE_ITEM: integrity.checksums(opt_state)}
  return ocp.args.Composite(**{PARAMS_ITEM: ocp.args.StandardSave(params),
                               OPT_STATE_ITEM: ocp.args.StandardSave(opt_state),
                               META_ITEM: ocp.args.JsonSave(meta)})


def read_step(directory: storage.PathLike, step: int, abstract_params: Any,
              abstract_opt_state: Any | None = None) -> Restored:
  """One verified step (`abstract_opt_state=None`: the parameters only); raises
  CheckpointIntegrityError naming the checkpoint, the array and its file."""
  where = storage.join(directory, str(step))
  read, error = None, ""
  try:  # this process's files and arrays
    read = _read(where, step, abstract_params, abstract_opt_state)
  except Exception as e:  # noqa: BLE001 - any failure to read means this step is unusable
    error = str(e) if isinstance(e, CheckpointIntegrityError) else (
        f"{where}: {type(e).__name__}: {e}")
  if not _everywhere(not error):  # before the checksums, a computation over every process
    raise CheckpointIntegrityError(error or f"{where}: failed to restore on another process")
  meta, items, files = read
  for item, tree in items.items():  # the same verdict on every process
    integrity.verify(tree, meta["checksums"][item], f"{where}/{item}", files[item])
  rng = None if meta.get("rng") is None else np.asarray(meta["rng"], np.uint32)
  return Restored(step=step, params=items[PARAMS_ITEM], opt_state=items.get(OPT_STATE_ITEM),
                  rng=rng, host_state=meta.get("host_state", {}))


def restore_newest(directory: storage.PathLike, candidates: Sequence[int], abstract_params: Any,
                   abstract_opt_state: Any | None = None, *,
                   quarantine: Callable[[int], None] | None = None) -> Restored | None:
  """The newest of `candidates` that passes `read_step`, falling back past failing ones.

  Returns None when there is no step at all; raises CheckpointIntegrityError listing every
  step's reason when none passes (nothing moved). Once one passes, each skipped step is
  reported (a warning naming it, the array and its file, and the step taken) and handed to
  `quarantine` when given (a reader must not move a running trainer's files).
  """
  failed: list[tuple[int, str]] = []
  with _QuietAbandonedReads() as quiet:
    for step in sorted(candidates, reverse=True):
      try:
        restored = read_step(directory, step, abstract_params, abstract_opt_state)
      except CheckpointIntegrityError as e:
        failed.append((step, str(e)))
        quiet.keep = True  # the failed read's stragglers may still come
        continue
      for bad, why in failed:  # one line each: the checkpoint, the array / file, the step
        warnings.warn(f"checkpoint {storage.join(directory, str(bad))} is not usable: {why}; "
                      f"going on from step {step}", RuntimeWarning, stacklevel=3)
        if quarantine is not None:
          quarantine(bad)
      return restored
  if failed:
    raise CheckpointIntegrityError(
        f"no intact checkpoint in {storage.path(directory)} (nothing was moved): "
        + " | ".join(f"step {step}: {error}" for step, error in failed))
  return None


def _read(where: storage.Path, step: int, abstract_params: Any, abstract_opt_state: Any | None,
          ) -> tuple[dict, dict, dict]:
  """(meta, restored items, their data files) of one step: meta and host-state digest
  checked, every referenced file present and long enough, then orbax's restore."""
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
    meta = checkpointer.restore(where, args=ocp.args.Composite(
        **{META_ITEM: ocp.args.JsonRestore()}))[META_ITEM]
    if not isinstance(meta, dict) or meta.get("step") != step or "checksums" not in meta:
      raise CheckpointIntegrityError(f"{where}/{META_ITEM}: inconsistent or without "
                                     f"checksums: {str(meta)[:200]}")
    if _digest(meta.get("host_state")) != meta.get("host_state_sha256"):
      raise CheckpointIntegrityError(f"{where}/{META_ITEM}: host state does not match its "
                                     f"digest")
    targets = {PARAMS_ITEM: abstract_params}
    if abstract_opt_state is not None:
      targets[OPT_STATE_ITEM] = abstract_opt_state
    files = {item: integrity.data_files(where / item) for item in targets}
    try:
      out = checkpointer.restore(where, args=ocp.args.Composite(
          **{item: ocp.args.StandardRestore(t) for item, t in targets.items()}))
    except Exception as e:  # noqa: BLE001 - name the checkpoint whatever orbax raised
      raise CheckpointIntegrityError(f"{where}: {integrity.read_error(e, files)}") from None
  return meta, {item: out[item] for item in targets}, files


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
