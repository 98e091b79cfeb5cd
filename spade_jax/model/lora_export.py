"""A trainer checkpoint's weights as Hugging Face files: a PEFT adapter or a merged model.

Behind `python -m spade_jax.export --workdir W [--step N] --adapter OUT --merged OUT`.
"""

from __future__ import annotations

import os

from spade_jax import storage
from spade_jax.model.hf_io import save_pretrained
from spade_jax.model.load import load_model
from spade_jax.model.lora_io import merged, save_peft_adapter


def export_weights(workdir: str | os.PathLike, *, step: int | None = None,
                   adapter: str | os.PathLike | None = None,
                   merged_dir: str | os.PathLike | None = None) -> list[str]:
  """Writes the adapter (PEFT) and / or the merged checkpoint; returns the paths written."""
  checkpoints = storage.join(workdir, "checkpoints")  # a local directory or gs://
  source = checkpoints if step is None else checkpoints / str(step)
  if not source.is_dir():
    raise FileNotFoundError(f"{source} does not exist: is {os.fspath(workdir)!r} a run's "
                            "workdir (with checkpoints/)?")
  model = load_model(source, dtype="float32")
  written = []
  if adapter is not None:
    if not model.cfg.lora_rank:
      raise ValueError(f"--adapter: {source} holds full weights, not LoRA adapters "
                       "(config.model.lora_rank was 0); use --merged for a full checkpoint")
    save_peft_adapter(model, adapter)
    written.append(os.fspath(adapter))
  if merged_dir is not None:
    save_pretrained(merged(model) if model.cfg.lora_rank else model, merged_dir)
    written.append(os.fspath(merged_dir))
  return written
