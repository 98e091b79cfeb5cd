"""Open a model from a Hugging Face directory or from a checkpoint written by the trainer.

`load_model(path)` accepts
  - a Hugging Face directory (config.json + safetensors) or hub id -> `from_pretrained`;
  - a trainer workdir (<workdir>/checkpoints/...), its checkpoints/ directory (the newest
    restorable step is used, older ones when the newest is unreadable), or one
    <workdir>/checkpoints/<step> directory.
Only the parameters are read from a trainer checkpoint (not the optimiser state), through
the one reader of that format (`checkpoint_format`), which verifies them and moves nothing;
the architecture comes from checkpoints/model_config.json.
"""

from __future__ import annotations

import os

import jax
from etils import epath
from flax import nnx
from jax.sharding import Mesh

from spade_jax.model import checkpoint_format, lora, lora_io
from spade_jax.model.hf_config import CheckpointFileNotFoundError
from spade_jax.model.hf_io import from_pretrained
from spade_jax.model.qwen3 import Qwen3
from spade_jax.model.sharding import state_shardings

RUN_CONFIG_FILE = "config.json"  # <workdir>/config.json: the run's whole config (spade_jax.run)


def trainer_workdir(path: str | os.PathLike[str]) -> epath.Path | None:
  """The workdir of a trainer checkpoint path (workdir, checkpoints/ or one step), else None."""
  found = checkpoint_format.locate(path)  # a local directory or gs://
  return None if found is None else found[0].parent


def load_model(path: str | os.PathLike[str], dtype: str | None = "float32",
               mesh: Mesh | None = None) -> Qwen3:
  """Loads a Qwen3 model; `dtype` sets parameter and compute dtype (None keeps them)."""
  found = checkpoint_format.locate(path)  # a local directory or gs://
  if found is None:
    return from_pretrained(path, dtype=dtype, mesh=mesh)
  ckpt_dir, step = found
  cfg = checkpoint_format.read_model_config(ckpt_dir)
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
  if step is not None:
    params = checkpoint_format.read_step(ckpt_dir, step, target).params
  else:
    restored = checkpoint_format.restore_newest(ckpt_dir, checkpoint_format.steps(ckpt_dir),
                                                target)
    if restored is None:
      raise CheckpointFileNotFoundError(f"{ckpt_dir}: trainer checkpoint directory holds no "
                                        f"step")
    params = restored.params
  if cfg.lora_rank:  # the checkpoint holds the adapters; the base comes from its record
    rest = nnx.state(lora_io.load_base(ckpt_dir, cfg, load_model, mesh))
  return nnx.merge(graphdef, params, rest)
