"""The model, tokenizer and engine of an evaluation run, from a checkpoint path.

`--checkpoint` is anything `spade_jax.model.load.load_model` opens: a Hugging Face
directory (config.json + safetensors) or hub id, a trainer workdir, its checkpoints/
directory or one <workdir>/checkpoints/<step>. The tokenizer is `--tokenizer` when given,
else the checkpoint directory's own (tokenizer.json), else, for a trainer checkpoint, the
one its run trained with (`tokenizer` of <workdir>/config.json, written by spade_jax.run).
"""

from __future__ import annotations

import json

from spade_jax import storage
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.model import load_model
from spade_jax.model.load import RUN_CONFIG_FILE, trainer_workdir
from spade_jax.tokenizer import load_tokenizer


def tokenizer_for(checkpoint: str, tokenizer: str | None):
  if tokenizer:
    return load_tokenizer(tokenizer)
  path = storage.path(checkpoint)  # a local directory or gs://
  if not path.is_dir() or (path / "tokenizer.json").is_file():
    return load_tokenizer(checkpoint)  # a hub id or a Hugging Face directory
  workdir = trainer_workdir(path)
  saved = None if workdir is None else workdir / RUN_CONFIG_FILE
  if saved is None or not saved.is_file():
    where = "" if saved is None else f" and there is no {saved}"
    raise ValueError(f"{checkpoint} has no tokenizer.json{where}: pass --tokenizer (a directory "
                     "or hub id with tokenizer.json, or 'tiny')")
  name = json.loads(saved.read_text()).get("tokenizer")
  if not isinstance(name, str) or not name:
    raise ValueError(f"{saved} names no tokenizer: pass --tokenizer")
  return load_tokenizer(name)


def engine_for(checkpoint: str, *, dtype: str, num_slots: int, max_cache_len: int,
               prefill_buckets: tuple[int, ...]) -> tuple[SlotConversationEngine, int]:
  """(engine, the cache length it got: at most the model's max_position_embeddings)."""
  model = load_model(checkpoint, dtype=dtype)
  max_cache_len = min(max_cache_len, int(model.cfg.max_position_embeddings))
  buckets = tuple(b for b in prefill_buckets if b < max_cache_len) or (max_cache_len // 2,)
  engine = SlotConversationEngine(model, num_slots=num_slots, max_cache_len=max_cache_len,
                                  prefill_buckets=buckets)
  return engine, max_cache_len
