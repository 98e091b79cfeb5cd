"""The metrics writer's settings: one frozen struct read from `config.metrics`."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from spade_jax.metrics.vendi import SentenceEmbedder


@dataclasses.dataclass(frozen=True)
class MetricsConfig:
  """`embedding_model`: a local sentence-transformers model directory (e.g. a copy of
  all-MiniLM-L6-v2, the paper's choice) for `curriculum/diversity_vendi_embedding`; "" = off
  (the TF-IDF+LSA Vendi is always written)."""

  embedding_model: str = ""

  def __post_init__(self):
    if self.embedding_model and not os.path.isdir(os.path.expanduser(self.embedding_model)):
      raise ValueError(f"config.metrics.embedding_model={self.embedding_model!r} is not a "
                       "directory: point it at a local sentence-transformers model, or '' for off")

  @classmethod
  def from_config(cls, config: Any) -> MetricsConfig:
    return cls(embedding_model=str(config.metrics.embedding_model))

  def embedder(self) -> SentenceEmbedder | None:
    """The sentence-embedding model (loaded here), or None when off."""
    if not self.embedding_model:
      return None
    return SentenceEmbedder(os.path.expanduser(self.embedding_model))
