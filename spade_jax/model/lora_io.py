"""LoRA models in and out: adapters onto a loaded base, the base record, PEFT and merged export.

A LoRA trainer checkpoint holds only the adapters. Beside it, <checkpoints>/lora_base.json
records where the base came from (a Hugging Face directory / hub id, or a preset and seed)
and its fingerprint (`lora.base_fingerprint`), so `load_model` can rebuild the policy and
refuses a base whose weights changed since.

`save_peft_adapter` writes what `peft.PeftModel.from_pretrained(hf_base, OUT)` loads:
adapter_config.json and adapter_model.safetensors with Hugging Face module names
(base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight [r, in], lora_B [out, r]).
`merged` folds scale * A B into each kernel: a plain model `save_pretrained` writes.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from spade_jax import storage
from spade_jax.model import hf_safetensors
from spade_jax.model.config import ModelConfig, get_preset
from spade_jax.model.hf_config import CheckpointError
from spade_jax.model.hf_io import _to_torch, tensor_maps
from spade_jax.model.lora import BASE, LoRAParam, adapted, base_fingerprint, target_names
from spade_jax.model.qwen3 import Qwen3
from spade_jax.model.sharding import create_sharded, state_shardings

BASE_FILE = "lora_base.json"
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


def with_adapters(model: Qwen3, cfg: ModelConfig, seed: int, mesh: Mesh | None = None) -> Qwen3:
  """`model`'s weights (no copy) in a graph built for `cfg`, with the fresh adapters that
  `Qwen3(cfg, rngs=nnx.Rngs(seed))` has (only the adapters are computed)."""
  factory = lambda: Qwen3(cfg, rngs=nnx.Rngs(seed))
  graphdef, abstract = nnx.split(nnx.eval_shape(factory))
  shardings = None if mesh is None else state_shardings(nnx.state(abstract, LoRAParam), mesh)
  adapters = jax.jit(lambda: nnx.state(factory(), LoRAParam), out_shardings=shardings)()
  return nnx.merge(graphdef, nnx.state(model), adapters)


def write_base_record(directory: str | os.PathLike, base: Qwen3, *, checkpoint: str,
                      preset: str, seed: int) -> None:
  """Records the base of a LoRA run next to its checkpoints (see the module docstring)."""
  record = {"checkpoint": checkpoint, "preset": preset, "seed": seed,
            "param_dtype": base.cfg.param_dtype, "fingerprint": base_fingerprint(base)}
  storage.write_text(storage.join(directory, BASE_FILE),  # atomic, local or gs://
                     json.dumps(record, indent=1, sort_keys=True))


def load_base(directory: storage.PathLike, cfg: ModelConfig, loader: Callable[..., Qwen3],
              mesh: Mesh | None = None) -> Qwen3:
  """The recorded base of a LoRA checkpoint directory, with `cfg`'s dtypes, no adapters;
  `loader(path, dtype=, mesh=)` opens a checkpoint (model.load.load_model)."""
  path = storage.join(directory, BASE_FILE)
  if not path.is_file():
    raise CheckpointError(f"{path} is missing: a LoRA checkpoint needs the record of its base")
  record = json.loads(storage.read_text(path))
  dtype = record["param_dtype"]  # the fingerprint's dtype; cast to cfg's once checked
  if record["checkpoint"]:
    base = loader(record["checkpoint"], dtype=dtype, mesh=mesh)
  else:
    preset = get_preset(record["preset"], param_dtype=dtype)
    base = create_sharded(lambda: Qwen3(preset, rngs=nnx.Rngs(record["seed"])), mesh)
  found = base_fingerprint(base)
  if found != record["fingerprint"]:
    raise CheckpointError(f"{path}: base {record['checkpoint'] or record['preset']} has "
                          f"fingerprint {found}, the adapters were trained on "
                          f"{record['fingerprint']}")
  state = nnx.state(base)
  if dtype != cfg.param_dtype:
    state = jax.tree.map(lambda x: x.astype(cfg.param_dtype), state)
  plain = cfg.replace(lora_rank=0)
  return nnx.merge(nnx.graphdef(nnx.eval_shape(lambda: Qwen3(plain, rngs=nnx.Rngs(0)))), state)


def merged(model: Qwen3) -> Qwen3:
  """A model without adapters whose kernels are W + scale * A B (float32 sum)."""
  plain = model.cfg.replace(lora_rank=0)
  graphdef = nnx.graphdef(nnx.eval_shape(lambda: Qwen3(plain, rngs=nnx.Rngs(0))))
  out = nnx.merge(graphdef, jax.tree.map(lambda x: x, nnx.state(model, BASE)))
  modules = dict(out.iter_modules())
  for path, proj in adapted(model):
    kernel = proj.kernel[...]
    modules[path].kernel.set_value((kernel.astype(np.float32) + proj.lora.delta())
                                   .astype(kernel.dtype))
  return out


def save_peft_adapter(model: Qwen3, out: str | os.PathLike, *,
                      base_model_name_or_path: str = "") -> list[str]:
  """Writes the adapters of `model` as a PEFT LoRA adapter directory; returns the files."""
  cfg = model.cfg
  if not cfg.lora_rank:
    raise ValueError("save_peft_adapter: the model has no LoRA adapters (lora_rank = 0)")
  directory = pathlib.Path(out)
  directory.mkdir(parents=True, exist_ok=True)
  names = {(m.param[:-1], m.layer): (m.hf.removesuffix(".weight"), m.n_in)
           for m in tensor_maps(cfg) if m.param[-1] == "kernel"}
  pending = []
  for path, proj in adapted(model):
    a = np.asarray(jax.device_get(proj.lora.a[...]), np.float32)
    b = np.asarray(jax.device_get(proj.lora.b[...]), np.float32)
    stacked = a.ndim > proj.lora.contracted + 1  # [L_g, in..., r]: one adapter per layer
    for layer in range(a.shape[0]) if stacked else (None,):
      hf, n_in = names[(tuple(path), layer)]
      a_l, b_l = (a, b) if layer is None else (a[layer], b[layer])
      for suffix, value in (("lora_A", _to_torch(a_l, n_in)), ("lora_B", _to_torch(b_l, 1))):
        value = np.ascontiguousarray(value)
        pending.append(hf_safetensors.PendingTensor(
            f"base_model.model.{hf}.{suffix}.weight", value.shape, value.dtype,
            lambda v=value: v))
  hf_safetensors.write_file(directory / ADAPTER_WEIGHTS, pending, {"format": "pt"})
  config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": cfg.lora_rank,
            "lora_alpha": cfg.lora_alpha, "lora_dropout": 0.0, "bias": "none",
            "target_modules": sorted(target_names(cfg)), "fan_in_fan_out": False,
            "use_rslora": False, "use_dora": False, "inference_mode": True,
            "init_lora_weights": True, "modules_to_save": None,
            "base_model_name_or_path": base_model_name_or_path}
  (directory / ADAPTER_CONFIG).write_text(json.dumps(config, indent=1, sort_keys=True))
  return [ADAPTER_CONFIG, ADAPTER_WEIGHTS]
