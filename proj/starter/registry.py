"""What the starter adds to the core: its two model presets, its memory library and its two
held-out evaluation suites (heldout.py).

Importing this module registers them (its configs and its build import it), so
`model.preset = "starter"`, `selfplay.library = "minigames"` and
`eval.suites = ("minigames_heldout",)` resolve in any process that
loads a starter config.
"""

from __future__ import annotations

import functools

from proj.starter import heldout, minigames
from spade_jax.eval.suites import register_suite
from spade_jax.model.config import ModelConfig, register_preset
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.memory import MemoryEntry
from spade_jax.selfplay.seed_envs import SeedLibrary, register_library

PRESETS = {
    # The starter policy: sized for a 60-minute build on 2 CPU cores, its vocabulary the
    # starter tokenizer's; 8192 positions hold a designer prompt and design.
    "starter": ModelConfig(vocab_size=12_288, hidden_size=256, num_layers=6, num_heads=4,
                           num_kv_heads=2, head_dim=64, intermediate_size=768,
                           tie_word_embeddings=True, max_position_embeddings=8192),
    # The pipeline's CI shape (`python -m proj.starter build --size ci`).
    "starter-ci": ModelConfig(vocab_size=4096, hidden_size=128, num_layers=4, num_heads=4,
                              num_kv_heads=2, head_dim=32, intermediate_size=256,
                              tie_word_embeddings=True, max_position_embeddings=8192),
}


def _minigame_entries(selfplay: SelfPlayConfig, split: str) -> list[MemoryEntry]:
  """Two minigames of each skill (more for a fixed-env baseline); every split alike, since
  minigames are generated, not held out."""
  return [MemoryEntry(g.uid, g.source, g.hint, g.category, "seed", -1)
          for g in minigames.library(selfplay.skills, min_size=selfplay.min_library_size)]


MINIGAMES = SeedLibrary(_minigame_entries, settings=("games",))


def _minigame_suite(name: str, data: str | None) -> heldout.MinigamesHeldout:
  return heldout.MinigamesHeldout(name)


# One factory per split, made once, so that registering again is a no-op.
SUITES = {name: functools.partial(_minigame_suite, name) for name in heldout.SPLIT_SEEDS}


def register() -> None:
  for name, cfg in PRESETS.items():
    register_preset(name, cfg)
  register_library("minigames", MINIGAMES)
  for name, factory in SUITES.items():
    register_suite(name, factory)


register()
