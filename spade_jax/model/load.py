"""Open a model from a Hugging Face directory or from a checkpoint written by the trainer.

`load_model(path)` accepts
  - a Hugging Face directory (config.json + safetensors) or hub id -> `from_pretrained`;
  - a trainer workdir (<workdir>/checkpoints/...), its checkpoints/ directory (the newest
    restorable step is used, older ones when the newest is unreadable), or one
    <workdir>/checkpoints/<step> directory.
Only the parameters are read from a trainer checkpoint (not the optimiser state); the
architecture comes from checkpoints/model_config.json, which the trainer writes with
`write_model_config` (the file format lives here so the model package needs nothing
from the trainer).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx
from jax.sharding import Mesh

from spade_jax import storage
from spade_jax.model import integrity, lora, lora_io
from spade_jax.model.config import ModelConfig
from spade_jax.model.hf_config import CheckpointError, CheckpointFileNotFoundError
from spade_jax.model.hf_io import from_pretrained
from spade_jax.model.qwen3 import Qwen3
from spade_jax.model.sharding import state_shardings

MODEL_CONFIG_FILE = "model_config.json"
RUN_CONFIG_FILE = "config.json"  # <workdir>/config.json: the run's whole config (spade_jax.run)
PARAMS_ITEM = "params"  # <step>/params/ holds the orbax StandardSave of the Param state


def write_model_config(directory: storage.PathLike, cfg: ModelConfig) -> None:
  """Writes <directory>/model_config.json atomically (`storage.write_text`).

  Every process of a multi-process run writes the same file: each through its own temporary
  name, so one's rename cannot take the other's temporary file away.
  """
  storage.write_text(storage.join(directory, MODEL_CONFIG_FILE),
                     json.dumps(dataclasses.asdict(cfg), indent=1, sort_keys=True))


def read_model_config(directory: storage.PathLike) -> ModelConfig:
  path = storage.join(directory, MODEL_CONFIG_FILE)
  values = json.loads(storage.read_text(path))
  fields = {f.name for f in dataclasses.fields(ModelConfig)}
  unknown = sorted(set(values) - fields)
  if unknown:
    raise CheckpointError(f"{path}: unknown ModelConfig field(s) {unknown}")
  return ModelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _trainer_checkpoint(path: epath.Path) -> tuple[epath.Path, epath.Path | None] | None:
  """(checkpoints dir, step dir or None for 'newest') if `path` is a trainer checkpoint."""
  for directory in (path, path / "checkpoints"):
    if (directory / MODEL_CONFIG_FILE).is_file():
      return directory, None
  if path.name.isdigit() and (path.parent / MODEL_CONFIG_FILE).is_file():
    return path.parent, path
  return None


def trainer_workdir(path: str | os.PathLike[str]) -> epath.Path | None:
  """The workdir of a trainer checkpoint path (workdir, checkpoints/ or one step), else None."""
  where = storage.path(path)  # a local directory or gs://
  found = _trainer_checkpoint(where) if where.is_dir() else None
  return None if found is None else found[0].parent


def load_model(path: str | os.PathLike[str], dtype: str | None = "float32",
               mesh: Mesh | None = None) -> Qwen3:
  """Loads a Qwen3 model; `dtype` sets parameter and compute dtype (None keeps them)."""
  where = storage.path(path)  # a local directory or gs://
  found = _trainer_checkpoint(where) if where.is_dir() else None
  if found is None:
    return from_pretrained(path, dtype=dtype, mesh=mesh)
  ckpt_dir, step_dir = found
  cfg = read_model_config(ckpt_dir)
  if dtype is not None:
    cfg = cfg.replace(param_dtype=dtype, compute_dtype=dtype)
  graphdef, abstract, rest = nnx.split(nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0))),
                                       lora.trainable(cfg), ...)
  if mesh is not None:
    shardings = state_shardings(abstract, mesh)
  else:
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shardings = jax.tree.map(lambda _: device, abstract)
  target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        abstract, shardings)
  params = _restore_params(ckpt_dir, step_dir, target)
  if cfg.lora_rank:  # the checkpoint holds the adapters; the base comes from its record
    rest = nnx.state(lora_io.load_base(ckpt_dir, cfg, load_model, mesh))
  return nnx.merge(graphdef, params, rest)


def _restore_params(ckpt_dir: epath.Path, step_dir: epath.Path | None, target):
  """The given step's params, or the newest step's that restores (with a warning per skip)."""
  if step_dir is not None:
    return _verified_params(step_dir, target)
  steps = sorted((p for p in ckpt_dir.iterdir() if p.name.isdigit() and p.is_dir()),
                 key=lambda p: -int(p.name))
  if not steps:
    raise CheckpointFileNotFoundError(f"{ckpt_dir}: trainer checkpoint directory holds no step")
  errors = []
  for step in steps:
    try:
      return _verified_params(step, target)
    except Exception as e:  # noqa: BLE001 - an unreadable step: say so, try the previous one
      errors.append(f"{step.name}: {type(e).__name__}: {e}")
      warnings.warn(f"{step} could not be restored ({type(e).__name__}: {e}); trying the "
                    f"previous step", RuntimeWarning, stacklevel=3)
  raise CheckpointError(f"no step in {ckpt_dir} could be restored: {errors}")


def _verified_params(step_dir: epath.Path, target):
  """The step's parameters, checked against the checksums its meta recorded at save."""
  meta = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(step_dir / "meta")
  if not isinstance(meta, dict) or PARAMS_ITEM not in meta.get("checksums", {}):
    raise integrity.CheckpointIntegrityError(f"{step_dir}/meta: no parameter checksums")
  item = step_dir / PARAMS_ITEM
  files = integrity.data_files(item)
  params = ocp.StandardCheckpointer().restore(item, target)
  integrity.verify(params, meta["checksums"][PARAMS_ITEM], os.fspath(item), files)
  return params
