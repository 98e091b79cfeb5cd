"""Low-rank adapters (LoRA) on the projections of a Qwen3 model.

`ModelConfig.lora_rank > 0` gives every projection whose Hugging Face name matches one of
`lora_targets` (fnmatch patterns over q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
down_proj) an adapter: y = x W + (alpha / rank) * (x A) B, with A [in..., r] drawn like
PEFT's default (Kaiming-uniform) and B [r, out...] zero, so a fresh adapter changes nothing.
A and B are `LoRAParam`s, an `nnx.Param` subclass: `nnx.Param` still selects every weight
(the engine samples with the adapters on), `LoRAParam` selects the adapters alone (the
trainer's trainable state) and `BASE` the frozen base weights. The MoE experts' kernels and
the router carry no adapter. A projection of a stacked layer group (qwen3.py) gets stacked
adapters: A [L_g, in..., r] and B [L_g, r, out...], each layer's slice drawn on its own.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model import integrity
from spade_jax.model.config import ModelConfig, lora_target_names
from spade_jax.model.layers import Einsum
from spade_jax.model.matmul import matmul


class LoRAParam(nnx.Param):
  """An adapter matrix (A or B): a parameter the trainer updates while the base is frozen."""


BASE = nnx.All(nnx.Param, nnx.Not(LoRAParam))  # the base weights, without the adapters


def trainable(cfg: ModelConfig):
  """The filter of the parameters a trainer updates: the adapters when LoRA is on."""
  return LoRAParam if cfg.lora_rank > 0 else nnx.Param


def config_fields(model_section: Any) -> dict[str, Any]:
  """config.model's LoRA fields (base_config) as ModelConfig fields."""
  m = model_section
  return dict(lora_rank=int(m.lora_rank), lora_alpha=float(m.lora_alpha),
              lora_targets=tuple(str(t) for t in m.lora_targets))


class LoRA(nnx.Module):
  """The low-rank update of one projection: scale * (x A) B on flattened activations."""

  def __init__(self, kernel: nnx.Param, contracted: int, cfg: ModelConfig, *, rngs: nnx.Rngs):
    shape, axes = tuple(kernel.shape), tuple(kernel.get_metadata()["logical_axes"])
    lead = 1 if axes[0] == "layers" else 0  # a stacked group's layer axis
    cut = lead + contracted  # the kernel's [L_g,] in... | out...
    r, dtype = cfg.lora_rank, jnp.dtype(cfg.param_dtype)
    fan_in = math.prod(shape[lead:cut])
    bound = 1.0 / math.sqrt(fan_in)  # PEFT / torch kaiming_uniform_(a=sqrt(5)) on lora_A
    a = jax.random.uniform(rngs.params(), (*shape[:cut], r), jnp.float32, -bound, bound)
    self.a = LoRAParam(a.astype(dtype), logical_axes=(*axes[:cut], None))
    self.b = LoRAParam(jnp.zeros((*shape[:lead], r, *shape[cut:]), dtype),
                       logical_axes=(*axes[:lead], None, *axes[cut:]))
    self.contracted = contracted
    self.scale = cfg.lora_alpha / r
    self.compute_dtype = jnp.dtype(cfg.compute_dtype)

  def __call__(self, x: jax.Array, out_dtype) -> jax.Array:
    """x [M, in] (flattened contracted axes) -> the update [M, out], in `out_dtype`."""
    a, b = self.a[...], self.b[...]
    xa = matmul(x, a.reshape(-1, a.shape[-1]), compute_dtype=self.compute_dtype)  # [M, r]
    xa = xa * jnp.asarray(self.scale, xa.dtype)
    return matmul(xa, b.reshape(b.shape[0], -1), compute_dtype=self.compute_dtype,
                  out_dtype=out_dtype)

  def delta(self) -> jax.Array:
    """scale * A B in the kernel's layout [L_g,] [in..., out...] (float32), for merging."""
    a, b = self.a[...].astype(jnp.float32), self.b[...].astype(jnp.float32)
    lead = a.ndim - 1 - self.contracted  # 1 when stacked
    flat = self.scale * (a.reshape(*a.shape[:lead], -1, a.shape[-1])
                         @ b.reshape(*b.shape[:lead + 1], -1))  # [L_g,] [in, out]
    return flat.reshape(*a.shape[:-1], *b.shape[lead + 1:])


def target_names(cfg: ModelConfig) -> tuple[str, ...]:
  """The projection names that `cfg.lora_targets` selects."""
  return lora_target_names(cfg.lora_targets)


def add_adapters(model: nnx.Module, cfg: ModelConfig, rngs: nnx.Rngs) -> None:
  """Gives each targeted dense projection of `model` (in place) a fresh adapter."""
  names = set(target_names(cfg))
  for path, module in model.iter_modules():
    if (isinstance(module, Einsum) and module.matmul and path and path[-1] in names
        and "experts" not in map(str, path)):
      module.lora = LoRA(module.kernel, module.contracted_axes, cfg, rngs=rngs)


def adapted(model: nnx.Module) -> list[tuple[tuple, Einsum]]:
  """(path, projection) of every projection of `model` that carries an adapter."""
  return [(path, m) for path, m in model.iter_modules()
          if isinstance(m, Einsum) and m.lora is not None]


# Settings that change how the weights run, not what they are (the dtype shows in the sums).
_NOT_ARCHITECTURE = ("param_dtype", "compute_dtype", "remat", "attention_impl")


def base_fingerprint(model: nnx.Module) -> str:
  """A digest of the base weights and architecture an adapter was trained on."""
  cfg = {k: v for k, v in vars(model.cfg).items()
         if not k.startswith("lora_") and k not in _NOT_ARCHITECTURE}
  sums = integrity.checksums(nnx.state(model, BASE))
  blob = json.dumps({"config": cfg, "checksums": sums}, sort_keys=True, default=str)
  return hashlib.sha256(blob.encode()).hexdigest()[:20]


# The host-state key under which a LoRA checkpoint records its base's fingerprint.
BASE_KEY = "lora_base"


def tag_host_state(host_state: dict | None, base: str | None) -> dict | None:
  """The host state a checkpoint saves: with the base fingerprint when LoRA is on."""
  return host_state if base is None else {**(host_state or {}), BASE_KEY: base}


def check_host_state(host_state: dict, base: str | None, where) -> dict:
  """The restored host state without the fingerprint; refuses adapters of another base."""
  host_state = dict(host_state)
  saved = host_state.pop(BASE_KEY, None)
  if saved != base:
    raise ValueError(f"{where}: LoRA checkpoint of base {saved} cannot resume on base {base} "
                     "(config.model.checkpoint / preset / seed differ from the run it came from)")
  return host_state
