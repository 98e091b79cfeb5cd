"""The metrics writer's settings: one frozen struct read from `config.metrics`."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from spade_jax.checks import from_section, require
from spade_jax.metrics.vendi import SentenceEmbedder


@dataclasses.dataclass(frozen=True)
class MetricsConfig:
  """`embedding_model`: a local sentence-transformers model directory (e.g. a copy of
  all-MiniLM-L6-v2, the paper's choice) for `curriculum/diversity_vendi_embedding`; "" = off
  (the TF-IDF+LSA Vendi is always written)."""

  embedding_model: str = ""

  def __post_init__(self):
    m = self.embedding_model
    require(isinstance(m, str) and (not m or os.path.isdir(os.path.expanduser(m))),
            "metrics.embedding_model", m,
            "a directory (a local sentence-transformers model) or '' for off")

  @classmethod
  def from_config(cls, config: Any) -> MetricsConfig:
    """The struct of `config.metrics`."""
    return from_section(cls, config.metrics, "metrics")

  def embedder(self) -> SentenceEmbedder | None:
    """The sentence-embedding model (loaded here), or None when off."""
    if not self.embedding_model:
      return None
    return SentenceEmbedder(os.path.expanduser(self.embedding_model))
