"""`config.model`: which policy a run starts from and how it runs, one frozen struct.

The weights come from `checkpoint` (a Hugging Face dir, a hub id or a trainer checkpoint)
or, when it is "", from the named `preset` at random init. The other fields are the run's
own choices, applied over either: the storage and matmul dtypes, the remat policy, the
training attention kernel and the LoRA adapters. `architecture()` is the preset's
`ModelConfig` with them; the defaults are `ModelConfig`'s, so each is written once.
"""

from __future__ import annotations

import dataclasses

from spade_jax.checks import ConfigError, require
from spade_jax.model.config import PRESETS, ModelConfig


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
  """The policy of a run: preset or checkpoint, and the settings applied over it."""

  preset: str = "tiny"  # name in spade_jax.model.config.PRESETS
  checkpoint: str = ""  # HF dir / hub id / trainer checkpoint; "" = random init of the preset
  param_dtype: str = ModelConfig.param_dtype  # storage dtype of weights and optimiser moments
  compute_dtype: str = ModelConfig.compute_dtype  # matmul dtype ("bfloat16" on TPU)
  # Per-layer rematerialisation in the training pass: "none", "dots" (keep matmul outputs),
  # "full" (recompute each layer) or "auto" (none on CPU, full on GPU / TPU; docs/model.md).
  remat: str = ModelConfig.remat
  # Training attention kernel: "auto" (by platform), "blocked", "xla", "cudnn", "pallas_tpu".
  attention_impl: str = ModelConfig.attention_impl
  # LoRA (spade_jax/model/lora.py): rank 0 = off (full weights train); alpha / rank scales the
  # update; targets are fnmatch patterns over q/k/v/o_proj and gate/up/down_proj.
  lora_rank: int = ModelConfig.lora_rank
  lora_alpha: float = ModelConfig.lora_alpha
  lora_targets: tuple[str, ...] = ModelConfig.lora_targets

  def __post_init__(self):
    require(self.preset in PRESETS, "model.preset", self.preset, f"one of {sorted(PRESETS)}")
    require(isinstance(self.checkpoint, str), "model.checkpoint", self.checkpoint,
            "a path or hub id ('' = random init)")
    try:  # the model's own struct checks dtypes, the remat policy, the kernel and LoRA
      self.architecture()
    except (ValueError, TypeError) as err:
      raise ConfigError(f"config.model: {err}") from None

  def run_fields(self) -> dict:
    """The ModelConfig fields this struct sets over a preset's or a checkpoint's."""
    return dict(compute_dtype=self.compute_dtype, attention_impl=self.attention_impl,
                remat=self.remat, lora_rank=self.lora_rank, lora_alpha=float(self.lora_alpha),
                lora_targets=tuple(self.lora_targets))

  def architecture(self) -> ModelConfig:
    """The preset's ModelConfig with this struct's dtypes, remat, kernel and LoRA."""
    return PRESETS[self.preset].replace(param_dtype=self.param_dtype, **self.run_fields())
