"""spade_jax.envs: the seed environment library (plain Python; never imports jax)."""

from spade_jax.envs.library import (
    GAME_CATEGORIES,
    KINDS,
    TOOL_CATEGORIES,
    SeedEnv,
    load_seed_library,
)

__all__ = ["GAME_CATEGORIES", "KINDS", "TOOL_CATEGORIES", "SeedEnv", "load_seed_library"]
