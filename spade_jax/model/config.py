"""Model configuration: one frozen struct for Qwen3 dense and Qwen3-MoE, plus presets.

The struct is what every layer reads; nothing else is threaded through the model.
Field names follow Hugging Face's `Qwen3Config` / `Qwen3MoeConfig` where one exists so
that `hf_io` maps them one to one.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

import jax
import jax.numpy as jnp

from spade_jax.model.platform import current_platform

# Per-layer rematerialisation (training memory): name -> what the backward pass may keep.
# "none" stores every activation; "full" recomputes each layer; "dots" keeps matmul outputs.
REMAT_POLICIES: dict[str, Any] = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
# What remat="auto" means per platform (docs/model.md, "Memory for long rows"): CPU hosts
# have the memory and no compute to spare; an accelerator keeps only each layer's input.
REMAT_AUTO = {"cpu": "none", "gpu": "full", "tpu": "full"}


def resolve_remat(name: str, platform: str | None = None) -> str:
  """The REMAT_POLICIES key `name` means on `platform` (default: `platform.current_platform()`)."""
  if name != "auto":
    return name
  return REMAT_AUTO.get(current_platform() if platform is None else platform, "none")


# CPU flags of a native bf16 dot product. Without one, XLA's CPU backend widens bf16 operands
# in software and fp32 matmuls are the faster ones (bench/RESULTS_LOG.md, "The starter build").
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def resolve_compute_dtype(name: str, platform: str | None = None) -> str:
  """The matmul dtype `name` means on `platform`: "auto" is bfloat16 on accelerators and on CPUs
  with CPU_BF16_FLAGS, else float32; any other name is itself."""
  if name != "auto":
    return name
  if (current_platform() if platform is None else platform) != "cpu":
    return "bfloat16"
  return "bfloat16" if CPU_BF16_FLAGS & _cpu_flags() else "float32"


def _cpu_flags() -> set[str]:
  """The host CPU's feature flags (Linux /proc/cpuinfo; empty where there is none)."""
  try:
    with open("/proc/cpuinfo") as f:
      line = next((line for line in f if line.startswith("flags")), "")
  except OSError:
    return set()
  return set(line.partition(":")[2].split())


# Projections a LoRA adapter may target (Hugging Face module names; model/lora.py).
LORA_TARGETABLE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_target_names(patterns: tuple[str, ...]) -> tuple[str, ...]:
  """The projections of LORA_TARGETABLE that any of the fnmatch `patterns` selects."""
  return tuple(n for n in LORA_TARGETABLE if any(fnmatch.fnmatch(n, p) for p in patterns))


# Uncached attention kernels (attention_impl.py): "auto" picks one for the platform.
ATTENTION_IMPLS = ("auto", "blocked", "xla", "cudnn", "pallas_tpu")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture and numerics of a Qwen3 (dense or MoE) decoder."""

  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  intermediate_size: int  # dense SwiGLU width (dense layers of an MoE model too)
  rms_norm_eps: float = 1e-6
  rope_theta: float = 1_000_000.0
  tie_word_embeddings: bool = False
  max_position_embeddings: int = 40_960
  # Mixture of experts (num_experts == 0 means a dense model).
  num_experts: int = 0
  num_experts_per_tok: int = 0
  moe_intermediate_size: int = 0
  norm_topk_prob: bool = True
  decoder_sparse_step: int = 1
  mlp_only_layers: tuple[int, ...] = ()
  # Numerics: parameters are stored in param_dtype, matmuls run in compute_dtype.
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  remat: str = "auto"  # key of REMAT_POLICIES, or "auto" (REMAT_AUTO by platform)
  attention_impl: str = "auto"  # one of ATTENTION_IMPLS
  # LoRA (model/lora.py): rank 0 = no adapters, the full weights train; alpha / rank scales
  # the update; targets are fnmatch patterns over LORA_TARGETABLE (e.g. ("*_proj",)).
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_targets: tuple[str, ...] = LORA_TARGETABLE

  def __post_init__(self):
    for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "intermediate_size", "decoder_sparse_step"):
      if getattr(self, name) < 1:
        raise ValueError(f"ModelConfig.{name}={getattr(self, name)} must be >= 1")
    if self.head_dim % 2:
      raise ValueError(f"head_dim={self.head_dim} must be even (rotary embeddings rotate halves)")
    if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
      raise ValueError(f"rms_norm_eps={self.rms_norm_eps} and rope_theta={self.rope_theta} "
                       "must be > 0")
    if self.num_experts < 0:
      raise ValueError(f"num_experts={self.num_experts} must be >= 0 (0 = dense)")
    if self.num_experts and self.moe_intermediate_size < 1:
      raise ValueError(f"moe_intermediate_size={self.moe_intermediate_size} must be >= 1 "
                       f"when num_experts={self.num_experts}")
    bad_layers = [i for i in self.mlp_only_layers if not 0 <= i < self.num_layers]
    if bad_layers:
      raise ValueError(f"mlp_only_layers {bad_layers} outside [0, num_layers={self.num_layers})")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
    if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
      raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} must be in "
                       f"[1, num_experts={self.num_experts}]")
    if self.remat != "auto" and self.remat not in REMAT_POLICIES:
      raise ValueError(f"ModelConfig.remat={self.remat!r}; expected one of "
                       f"{sorted([*REMAT_POLICIES, 'auto'])}")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(f"ModelConfig.attention_impl={self.attention_impl!r}; expected one of "
                       f"{ATTENTION_IMPLS}")
    if self.lora_rank < 0 or (self.lora_rank and not self.lora_alpha > 0):
      raise ValueError(f"ModelConfig.lora_rank={self.lora_rank} must be >= 0 (0 = off) and "
                       f"lora_alpha={self.lora_alpha} > 0")
    if self.lora_rank and not lora_target_names(self.lora_targets):
      raise ValueError(f"ModelConfig.lora_targets={self.lora_targets} match none of "
                       f"{LORA_TARGETABLE}")
    for name in ("param_dtype", "compute_dtype"):
      value = getattr(self, name)
      try:
        floating = jnp.issubdtype(jnp.dtype(value), jnp.floating)
      except TypeError:
        floating = False
      if not floating:
        raise ValueError(f"ModelConfig.{name}={value!r} is not a floating dtype name "
                         "(e.g. 'float32', 'bfloat16')")

  @property
  def is_moe(self) -> bool:
    return self.num_experts > 0

  def is_moe_layer(self, layer: int) -> bool:
    """Qwen3-MoE rule: sparse unless listed in mlp_only_layers or off the sparse step."""
    return (self.is_moe and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0)

  def layer_groups(self) -> tuple[tuple[bool, int], ...]:
    """Runs of consecutive layers of one kind, in order: (is MoE, count) each. Each run is
    stored stacked and scanned (qwen3.Qwen3); a homogeneous model is one run."""
    runs: list[list] = []
    for i in range(self.num_layers):
      moe = self.is_moe_layer(i)
      if runs and runs[-1][0] == moe:
        runs[-1][1] += 1
      else:
        runs.append([moe, 1])
    return tuple((moe, n) for moe, n in runs)

  def layer_position(self, layer: int) -> tuple[int, int]:
    """(group, index within the group) of decoder layer `layer` (see layer_groups)."""
    if not 0 <= layer < self.num_layers:
      raise IndexError(f"layer {layer} outside [0, num_layers={self.num_layers})")
    sizes, g = [n for _, n in self.layer_groups()], 0
    while layer >= sizes[g]:
      layer -= sizes[g]
      g += 1
    return g, layer

  def replace(self, **changes: Any) -> ModelConfig:
    return dataclasses.replace(self, **changes)


_QWEN3_COMMON = dict(vocab_size=151_936, head_dim=128, rms_norm_eps=1e-6,
                     rope_theta=1_000_000.0, max_position_embeddings=40_960)

PRESETS: dict[str, ModelConfig] = {
    "qwen3-0.6b": ModelConfig(hidden_size=1024, num_layers=28, num_heads=16, num_kv_heads=8,
                              intermediate_size=3072, tie_word_embeddings=True, **_QWEN3_COMMON),
    "qwen3-1.7b": ModelConfig(hidden_size=2048, num_layers=28, num_heads=16, num_kv_heads=8,
                              intermediate_size=6144, tie_word_embeddings=True, **_QWEN3_COMMON),
    "qwen3-4b": ModelConfig(hidden_size=2560, num_layers=36, num_heads=32, num_kv_heads=8,
                            intermediate_size=9728, tie_word_embeddings=True, **_QWEN3_COMMON),
    "qwen3-8b": ModelConfig(hidden_size=4096, num_layers=36, num_heads=32, num_kv_heads=8,
                            intermediate_size=12288, **_QWEN3_COMMON),
    "qwen3-14b": ModelConfig(hidden_size=5120, num_layers=40, num_heads=40, num_kv_heads=8,
                             intermediate_size=17408, **_QWEN3_COMMON),
    "qwen3-32b": ModelConfig(hidden_size=5120, num_layers=64, num_heads=64, num_kv_heads=8,
                             intermediate_size=25600, **_QWEN3_COMMON),
    "qwen3-30b-a3b": ModelConfig(hidden_size=2048, num_layers=48, num_heads=32, num_kv_heads=4,
                                 intermediate_size=6144, num_experts=128, num_experts_per_tok=8,
                                 moe_intermediate_size=768, norm_topk_prob=True,
                                 **_QWEN3_COMMON),
    # CPU test model: vocabulary matches the bundled SentencePiece tokenizer.
    "tiny": ModelConfig(vocab_size=1024, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                        head_dim=16, intermediate_size=128, tie_word_embeddings=True,
                        max_position_embeddings=4096),
    "tiny-moe": ModelConfig(vocab_size=1024, hidden_size=64, num_layers=2, num_heads=4,
                            num_kv_heads=2, head_dim=16, intermediate_size=128, num_experts=4,
                            num_experts_per_tok=2, moe_intermediate_size=32,
                            mlp_only_layers=(0,), max_position_embeddings=4096),
    # CPU benchmark shape (~42M parameters).
    "bench-40m": ModelConfig(vocab_size=32_000, hidden_size=512, num_layers=8, num_heads=8,
                             num_kv_heads=4, head_dim=64, intermediate_size=1536,
                             tie_word_embeddings=True, max_position_embeddings=4096),
}


def register_preset(name: str, cfg: ModelConfig) -> None:
  """Adds `cfg` as preset `name` (for `model.preset`), as a project beside the core does when
  it is imported (proj/starter). Registering the same config again is a no-op; another config
  under a taken name is refused."""
  if PRESETS.setdefault(name, cfg) != cfg:
    raise ValueError(f"model preset {name!r} is taken by another config")


def get_preset(name: str, **overrides: Any) -> ModelConfig:
  """Returns the named preset, optionally with fields replaced (e.g. dtypes)."""
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
  return PRESETS[name].replace(**overrides)
