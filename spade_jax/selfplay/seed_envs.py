"""The libraries the environment memory starts from (`selfplay.library`), by name.

Two are built in: "seeds" (the setting's seed environments, envs/seeds/) and "vowels" (the
dense-reward vowels environment in every skill, so a random model earns varied returns). A
project beside the core adds its own with `register_library` when it is imported
(proj/starter adds "minigames"), so the core carries no library that exists for one project.
`SelfPlayConfig` checks `selfplay.library` against `library_names()` and the library's
settings; `seed_entries` is what the loop's memory starts from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from spade_jax.envs.library import load_seed_library
from spade_jax.envs.vowels import VOWELS_HINT, VOWELS_SOURCE
from spade_jax.selfplay.memory import MemoryEntry
from spade_jax.selfplay.prompts import SETTINGS

if TYPE_CHECKING:
  from spade_jax.selfplay.config import SelfPlayConfig

# (the run's SelfPlayConfig, the seed split: "all", "train" or "heldout") -> entries.
Entries = Callable[["SelfPlayConfig", str], list[MemoryEntry]]


@dataclasses.dataclass(frozen=True)
class SeedLibrary:
  entries: Entries
  settings: tuple[str, ...] = SETTINGS  # the settings whose environments it holds


def _seeds(selfplay: SelfPlayConfig, split: str) -> list[MemoryEntry]:
  return [MemoryEntry(f"seed/{s.name}", s.source, s.hint, s.category, "seed", -1)
          for s in load_seed_library(kind=selfplay.setting, categories=selfplay.skills,
                                     split=split)]


def _vowels(selfplay: SelfPlayConfig, split: str) -> list[MemoryEntry]:
  return [MemoryEntry(f"vowels/{skill}", VOWELS_SOURCE, VOWELS_HINT, skill, "seed", -1)
          for skill in selfplay.skills]


_LIBRARIES: dict[str, SeedLibrary] = {"seeds": SeedLibrary(_seeds),
                                      "vowels": SeedLibrary(_vowels)}


def register_library(name: str, library: SeedLibrary) -> None:
  """Adds `library` as `selfplay.library = name`. Registering the same library again is a
  no-op; another under a taken name is refused."""
  if _LIBRARIES.setdefault(name, library) != library:
    raise ValueError(f"seed library {name!r} is taken by another library")


def library_names() -> tuple[str, ...]:
  return tuple(_LIBRARIES)


def get_library(name: str) -> SeedLibrary:
  if name not in _LIBRARIES:
    raise ValueError(f"unknown seed library {name!r}; expected one of {library_names()}")
  return _LIBRARIES[name]


def seed_entries(selfplay: SelfPlayConfig, split: str = "all") -> list[MemoryEntry]:
  """The entries the memory of a run with `selfplay` starts from (seeds of `split`)."""
  return get_library(selfplay.library).entries(selfplay, split)
