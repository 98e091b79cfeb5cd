"""Hugging Face Qwen3 / Qwen3-MoE checkpoints <-> `Qwen3`: `from_pretrained`, `save_pretrained`.

Loading streams: the model is built abstractly (`nnx.eval_shape`, no memory), every tensor's
presence and shape is checked against config.json before any weight is read, then tensors are
read one at a time (largest first), converted from torch layout [out, in] to the parameter
layout, cast, and `device_put` straight into their target sharding. Host memory beyond the
loaded model stays near the largest tensor: a layer group's stacked parameter [L_g, ...] is
filled on the device one layer's tensor at a time, and MoE experts are stacked into [E, ...]
one layer at a time. Any error leaves nothing half-loaded: the model object is only
assembled at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spade_jax import storage
from spade_jax.model import hf_config, hf_safetensors
from spade_jax.model.config import ModelConfig
from spade_jax.model.qwen3 import Qwen3
from spade_jax.model.sharding import logical_to_spec

# Tensors a checkpoint may carry that the model does not need.
_IGNORED = re.compile(r".*\.rotary_emb\.inv_freq$")
_HUB_PATTERNS = ["*.json", "*.safetensors"]


@dataclasses.dataclass(frozen=True)
class TensorMap:
  """One parameter and the Hugging Face tensor(s) it comes from.

  n_in == 0: copied as is. n_in == k: a torch Linear weight [out, in] whose `in` is the
  product of the kernel's first k dims and `out` the product of the rest (kernel = w.T
  reshaped). experts > 0: the kernel is [E, ...], stacked from per-expert tensors `hf.format(e)`.
  layer: the slice of a layer group's stacked parameter [L_g, ...] (None: not stacked).
  """
  param: tuple[str | int, ...]
  hf: str
  n_in: int
  experts: int = 0
  layer: int | None = None

  def hf_names(self) -> list[str]:
    return [self.hf.format(e=e) for e in range(self.experts)] if self.experts else [self.hf]


def tensor_maps(cfg: ModelConfig) -> list[TensorMap]:
  """The parameter <-> tensor correspondence for a config, in Hugging Face order."""
  maps = [TensorMap(("embed", "embedding"), "model.embed_tokens.weight", 0)]
  for i in range(cfg.num_layers):
    maps += _layer_maps(cfg, i)
  maps.append(TensorMap(("final_norm", "scale"), "model.norm.weight", 0))
  if not cfg.tie_word_embeddings:
    maps.append(TensorMap(("lm_head", "kernel"), "lm_head.weight", 1))
  return maps


def _layer_maps(cfg: ModelConfig, i: int) -> list[TensorMap]:
  """Decoder layer i's tensors: slice j of its group g's stacked parameters."""
  g, j = cfg.layer_position(i)
  p = f"model.layers.{i}."
  one = lambda path, hf, n_in, experts=0: TensorMap(("groups", g, *path), p + hf, n_in,
                                                    experts, j)
  maps = [
      one(("input_norm", "scale"), "input_layernorm.weight", 0),
      one(("attn", "q_proj", "kernel"), "self_attn.q_proj.weight", 1),
      one(("attn", "k_proj", "kernel"), "self_attn.k_proj.weight", 1),
      one(("attn", "v_proj", "kernel"), "self_attn.v_proj.weight", 1),
      one(("attn", "o_proj", "kernel"), "self_attn.o_proj.weight", 2),
      one(("attn", "q_norm", "scale"), "self_attn.q_norm.weight", 0),
      one(("attn", "k_norm", "scale"), "self_attn.k_norm.weight", 0),
      one(("post_attn_norm", "scale"), "post_attention_layernorm.weight", 0),
  ]
  if cfg.is_moe_layer(i):
    maps.append(one(("mlp", "router", "kernel"), "mlp.gate.weight", 1))
    maps += [one(("mlp", proj, "kernel"), f"mlp.experts.{{e}}.{proj}.weight", 1,
                 cfg.num_experts) for proj in ("gate_proj", "up_proj", "down_proj")]
  else:
    maps += [one(("mlp", proj, "kernel"), f"mlp.{proj}.weight", 1)
             for proj in ("gate_proj", "up_proj", "down_proj")]
  return maps


def hf_tensor_shape(kernel_shape: tuple[int, ...], n_in: int) -> tuple[int, ...]:
  """Torch shape of one (per-expert) tensor for a kernel shape."""
  if n_in == 0:
    return kernel_shape
  return (math.prod(kernel_shape[n_in:]), math.prod(kernel_shape[:n_in]))


def _to_kernel(w: np.ndarray, n_in: int, shape: tuple[int, ...]) -> np.ndarray:
  return w if n_in == 0 else w.T.reshape(shape)


def _to_torch(kernel: np.ndarray, n_in: int) -> np.ndarray:
  return kernel if n_in == 0 else kernel.reshape(math.prod(kernel.shape[:n_in]), -1).T


def resolve_checkpoint(path: str | os.PathLike[str]) -> pathlib.Path:
  """A local checkpoint directory: a gs:// one copied (`storage.local_copy`), a hub id
  ("org/name") downloaded."""
  if storage.is_url(path):
    return storage.local_copy(path)
  local = pathlib.Path(path).expanduser()
  if local.is_dir():
    return local
  name = os.fspath(path)
  if local.exists() or name.count("/") != 1 or name.startswith((".", "/", "~")):
    raise hf_config.CheckpointFileNotFoundError(f"{local}: not a checkpoint directory")
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  try:
    return pathlib.Path(huggingface_hub.snapshot_download(name, allow_patterns=_HUB_PATTERNS))
  except Exception as e:  # hub errors vary (offline, unknown repo, gated): name the cause
    raise hf_config.CheckpointFileNotFoundError(
        f"{name!r}: not a local directory and the hub download failed ({e})") from e


def _check_tensors(maps: list[TensorMap], reader: hf_safetensors.CheckpointReader,
                   abstract: dict[Any, Any], cfg: ModelConfig, source: pathlib.Path) -> None:
  """Every needed tensor present with the shape config.json implies; no unknown tensors."""
  needed = set()
  for m in maps:
    shape = _slice_shape(abstract[m.param], m)
    expected = hf_tensor_shape(shape[1:] if m.experts else shape, m.n_in)
    for name in m.hf_names():
      info = reader.info(name)
      if info.shape != expected:
        raise hf_config.TensorShapeError(
            f"{info.file}: tensor {name!r} has shape {list(info.shape)}; {source} implies "
            f"{list(expected)}")
      if not jnp.issubdtype(info.dtype, jnp.floating):
        raise hf_config.TensorShapeError(f"{info.file}: tensor {name!r} has dtype {info.dtype}")
      needed.add(name)
  if cfg.tie_word_embeddings:
    needed.add("lm_head.weight")  # some tied checkpoints still store it; it is not used
  unexpected = sorted(n for n in reader.names() - needed if not _IGNORED.match(n))
  if unexpected:
    raise hf_config.CheckpointError(
        f"{reader.directory}: {len(unexpected)} tensors do not belong to the model {source} "
        f"describes, e.g. {unexpected[:3]}")


def _slice_shape(var: nnx.Variable, m: TensorMap) -> tuple[int, ...]:
  """Shape of what `m` maps: the parameter's, less the layer axis of a stacked one."""
  shape = tuple(var.shape)
  return shape if m.layer is None else shape[1:]


@functools.partial(jax.jit, donate_argnums=0)
def _set_layer(stacked: jax.Array, value: jax.Array, layer: jax.Array) -> jax.Array:
  """stacked [L_g, ...] with slice `layer` replaced by value [...], in place."""
  return jax.lax.dynamic_update_index_in_dim(stacked, value.astype(stacked.dtype), layer, 0)


@functools.cache
def _zeros(shape: tuple[int, ...], dtype: np.dtype, sharding: jax.sharding.Sharding):
  """A jitted maker of zeros [shape] placed in `sharding`, built on the devices."""
  return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=sharding)


def _read_kernel(m: TensorMap, reader: hf_safetensors.CheckpointReader,
                 shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
  """The parameter value on the host, in its kernel layout and dtype."""
  if not m.experts:
    return np.ascontiguousarray(_to_kernel(reader.read(m.hf), m.n_in, shape), dtype=dtype)
  stacked = np.empty(shape, dtype)  # [E, ...]: one layer's experts at a time
  for e, name in enumerate(m.hf_names()):
    stacked[e] = _to_kernel(reader.read(name), m.n_in, shape[1:])
  return stacked


def _sharding(var: nnx.Variable, mesh: Mesh | None, device: jax.Device,
              stacked: bool = False) -> jax.sharding.Sharding:
  """Target sharding of an abstract parameter, from its logical axis names (`device` without
  a mesh); of one layer's slice of it when `stacked`."""
  if mesh is None:
    return jax.sharding.SingleDeviceSharding(device)
  axes = var.get_metadata().get("logical_axes")
  spec = PartitionSpec() if axes is None else logical_to_spec(axes, var.shape, mesh)
  return NamedSharding(mesh, PartitionSpec(*spec[1:]) if stacked else spec)


def load_weights(cfg: ModelConfig, reader: hf_safetensors.CheckpointReader,
                 mesh: Mesh | None = None, source: pathlib.Path | None = None) -> Qwen3:
  """Builds `Qwen3(cfg)` from the reader's tensors, each placed into its sharding on `mesh`."""
  source = source or reader.directory / "config.json"
  graphdef, abstract_state = nnx.split(nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0))))
  abstract = dict(nnx.to_flat_state(abstract_state))
  maps = tensor_maps(cfg)
  if {m.param for m in maps} != set(abstract):
    raise RuntimeError(f"hf_io.tensor_maps is out of date with Qwen3's parameters: "
                       f"{sorted(set(abstract) ^ {m.param for m in maps}, key=str)[:4]}")
  _check_tensors(maps, reader, abstract, cfg, source)
  device = jax.devices()[0]
  values = {}
  # Largest first: peak host memory ~ loaded weights + one transient copy of a small tensor.
  for m in sorted(maps, key=lambda m: -math.prod(abstract[m.param].shape)):
    var = abstract[m.param]
    host = _read_kernel(m, reader, _slice_shape(var, m), np.dtype(var.dtype))
    sharding = _sharding(var, mesh, device, stacked=m.layer is not None)
    # Each device (of every host) copies just its own slice.
    value = jax.make_array_from_callback(host.shape, sharding,
                                         lambda index, host=host: host[index])
    if m.layer is not None:
      if m.param not in values:
        values[m.param] = _zeros(var.shape, np.dtype(var.dtype),
                                 _sharding(var, mesh, device))()
      value = _set_layer(values[m.param], value, m.layer)
    # Wait for the copy: transfers are asynchronous, and host buffers queued behind a busy
    # transfer would all stay alive at once.
    values[m.param] = jax.block_until_ready(value)
    del host, value
  state = nnx.from_flat_state([(path, abstract[path].replace(values[path]))
                               for path in abstract])
  return nnx.merge(graphdef, state)


def from_pretrained(path: str | os.PathLike[str], dtype: str | None = "bfloat16",
                    mesh: Mesh | None = None, compute_dtype: str | None = None) -> Qwen3:
  """Loads a Hugging Face Qwen3 / Qwen3-MoE checkpoint.

  Args:
    path: local directory (config.json + model.safetensors or shards with
      model.safetensors.index.json), or a hub id such as "Qwen/Qwen3-0.6B".
    dtype: parameter dtype; None keeps the checkpoint's own dtype.
    mesh: place every parameter into its sharding on this mesh (see sharding.py); None puts
      the model on the first device.
    compute_dtype: matmul dtype; None means `dtype` (e.g. "float32" params with "bfloat16"
      compute for training).
  Raises:
    CheckpointError (subclasses name the problem) with the file and the field or tensor.
  """
  directory = resolve_checkpoint(path)
  config_path = directory / "config.json"
  hf = hf_config.read_json(config_path)
  cfg = hf_config.config_from_hf(hf, config_path, dtype or hf_config.checkpoint_dtype(hf))
  if compute_dtype is not None:
    cfg = cfg.replace(compute_dtype=compute_dtype)
  return load_weights(cfg, hf_safetensors.CheckpointReader(directory), mesh, config_path)


def _host_array(value: jax.Array) -> np.ndarray:
  return np.asarray(jax.device_get(value))


def _layer_slice(params: dict[Any, nnx.Variable], m: TensorMap) -> jax.Array:
  """The value `m` maps, on the devices: a stacked parameter's slice `m.layer`."""
  value = params[m.param][...]
  return value if m.layer is None else value[m.layer]


def save_pretrained(model: Qwen3, path: str | os.PathLike[str], *, dtype: str | None = None,
                    max_shard_bytes: int = 4 << 30, layout: str = "transformers5") -> list[str]:
  """Writes config.json and safetensors (sharded + index above `max_shard_bytes`).

  transformers' Qwen3ForCausalLM / Qwen3MoeForCausalLM `from_pretrained` opens the result.
  Tensors are gathered to the host one at a time (MoE: one stacked layer at a time).

  Args:
    model: the model to save.
    path: output directory (created; existing weight files in it are replaced).
    dtype: dtype of the saved tensors; None keeps the parameters' dtype.
    max_shard_bytes: largest file before the checkpoint is split into shards.
    layout: "transformers5" or "transformers4" config.json field names.
  Returns:
    The safetensors file names written.
  """
  cfg = model.cfg
  directory = pathlib.Path(path)
  directory.mkdir(parents=True, exist_ok=True)
  params = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
  out_dtype = jnp.dtype(dtype or cfg.param_dtype)
  # One layer's slice of a stacked parameter at a time; its expert kernels are fetched once
  # and reused for their E tensors.
  host = functools.lru_cache(maxsize=1)(lambda m: _host_array(_layer_slice(params, m)))
  pending = []
  for m in tensor_maps(cfg):
    shape = _slice_shape(params[m.param], m)
    if m.experts:
      for e, name in enumerate(m.hf_names()):
        fetch = functools.partial(lambda m, e: _to_torch(host(m)[e], m.n_in).astype(out_dtype),
                                  m, e)
        pending.append(hf_safetensors.PendingTensor(name, hf_tensor_shape(shape[1:], m.n_in),
                                                    out_dtype, fetch))
    else:
      fetch = functools.partial(lambda m: _to_torch(_host_array(_layer_slice(params, m)), m.n_in)
                                .astype(out_dtype), m)
      pending.append(hf_safetensors.PendingTensor(m.hf, hf_tensor_shape(shape, m.n_in), out_dtype,
                                                  fetch))
  files = hf_safetensors.write_checkpoint(directory, pending, max_shard_bytes)
  config = hf_config.config_to_hf(cfg, str(out_dtype), layout)
  hf_config.write_json(directory / "config.json", config)
  return files
