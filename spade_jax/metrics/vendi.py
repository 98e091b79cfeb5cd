"""Diversity of a set of environment sources: Vendi score / n over fixed embeddings.

Vendi score (Friedman & Dieng, 2023) is the exponential of the Shannon entropy of the
eigenvalues of K / n, K a similarity kernel with unit diagonal: the "effective number" of
distinct items. Divided by n it lies in [1/n, 1]: 1/n for n identical sources, 1 for
mutually orthogonal ones. `vendi_per_n(sources, n=...)` divides by another n: the metrics
report it over the step's environment budget too (the paper's convention, docs/metrics.md).

Two embeddings, as in the paper's appendix I:
* `TfidfLsa` (always on): sublinear TF-IDF over code tokens (identifiers, numbers, single
  symbols) followed by truncated SVD (LSA, no centring) to at most 128 dims. Vocabulary, IDF
  and projection are fitted ONCE on a fixed reference set (`reference_embedder()`: the seed
  library's sources cut into method-sized chunks), so the embedding of a source does not
  depend on which other sources share its step and values compare across steps and runs.
  Tokens the reference never saw get the largest IDF (as rare as can be) and one coordinate
  EACH beside the LSA ones (the unknown tokens of the sources embedded together, sorted): two
  sources share an unknown coordinate only when they share that very token, so new
  environments are neither zero vectors nor made alike by hash collisions, and the cosine of
  two sources does not depend on what else is embedded with them; rows are L2-normalised.
* `SentenceEmbedder` (optional): a local sentence-transformers model
  (`config.metrics.embedding_model`, e.g. a copy of all-MiniLM-L6-v2), unit-normalised.
K is the cosine kernel of the embeddings. Numpy only, except the optional model.
"""

from __future__ import annotations

import collections
import functools
import math
import re
from collections.abc import Sequence

import numpy as np

from spade_jax.envs.library import load_seed_library

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|[^\sA-Za-z0-9_]")
_CHUNK_START = re.compile(r"^(?=[ \t]*(?:def|class) )", re.MULTILINE)
LSA_DIMS = 128


def tokenize(text: str) -> list[str]:
  """Identifiers (lower-cased), numbers and single punctuation characters."""
  return [t.lower() for t in _TOKEN.findall(text)]


def _sublinear_tf(docs: Sequence[str], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
  """1 + log(count): [n, V] for in-vocabulary tokens, [n, U] for the U unknown ones."""
  counts = [collections.Counter(tokenize(doc) or ["<empty>"]) for doc in docs]
  unknown = sorted({t for c in counts for t in c if t not in index})
  oov_index = {t: j for j, t in enumerate(unknown)}
  tf, oov = np.zeros((len(docs), len(index))), np.zeros((len(docs), len(unknown)))
  for i, doc_counts in enumerate(counts):
    for token, count in doc_counts.items():
      if token in index:
        tf[i, index[token]] = 1.0 + math.log(count)
      else:
        oov[i, oov_index[token]] = 1.0 + math.log(count)
  return tf, oov


class TfidfLsa:
  """TF-IDF + LSA fitted on a reference set; `embed` maps any sources into that space."""

  def __init__(self, reference: Sequence[str], dims: int = LSA_DIMS, tol: float = 1e-10):
    if not reference:
      raise ValueError("TfidfLsa needs a non-empty reference set")
    vocab = sorted({t for doc in reference for t in tokenize(doc) or ["<empty>"]})
    self.index = {t: j for j, t in enumerate(vocab)}
    tf, _ = _sublinear_tf(reference, self.index)
    df = (tf > 0).sum(axis=0)  # [V]
    self.idf = np.log((1.0 + len(reference)) / (1.0 + df)) + 1.0  # [V]
    self.oov_idf = math.log(1.0 + len(reference)) + 1.0  # df = 0: the largest IDF
    x = _unit_rows(tf * self.idf)  # [n_ref, V]
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    rank = int((s > tol * max(s.max(initial=0.0), 1.0)).sum())
    self.components = vt[:max(1, min(dims, rank))]  # [k, V]

  @property
  def dims(self) -> int:
    return self.components.shape[0]

  def tfidf(self, docs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """[n, V] TF-IDF rows and [n, U] rows of the U unknown tokens, jointly L2-normalised."""
    tf, oov = _sublinear_tf(docs, self.index)
    x, y = tf * self.idf, oov * self.oov_idf
    norm = np.sqrt((x * x).sum(axis=1) + (y * y).sum(axis=1))[:, None]
    return x / norm, y / norm

  def embed(self, docs: Sequence[str]) -> np.ndarray:
    """[n, k + U] unit rows: LSA coordinates, then one per unknown token of `docs`."""
    x, oov = self.tfidf(docs)
    return _unit_rows(np.concatenate([x @ self.components.T, oov], axis=1))


class SentenceEmbedder:
  """A local sentence-transformers model (optional dependency), unit-normalised rows."""

  def __init__(self, path: str):
    try:
      from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
    except ImportError:
      raise ImportError(f"config.metrics.embedding_model={path!r} needs the optional package "
                        "sentence-transformers (pip install -e '.[embedding]')") from None
    self.model = SentenceTransformer(path, device="cpu", local_files_only=True)

  def embed(self, docs: Sequence[str]) -> np.ndarray:
    return _unit_rows(np.asarray(self.model.encode(list(docs)), dtype=np.float64))


def _unit_rows(x: np.ndarray, tol: float = 1e-12) -> np.ndarray:
  return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), tol)


def reference_chunks() -> list[str]:
  """The fixed reference set: every seed environment's source cut at def / class lines."""
  return [chunk for seed in load_seed_library() for chunk in _CHUNK_START.split(seed.source)
          if chunk.strip()]


@functools.lru_cache(maxsize=1)
def reference_embedder() -> TfidfLsa:
  return TfidfLsa(reference_chunks())


def vendi_score(embeddings: np.ndarray) -> float:
  """exp(entropy of eig(K / n)) for the cosine kernel of unit-norm rows [n, d]."""
  n = embeddings.shape[0]
  if n == 0:
    return float("nan")
  k = embeddings @ embeddings.T / n  # [n, n]
  lam = np.clip(np.linalg.eigvalsh(k), 0.0, None)
  lam = lam[lam > 1e-12]
  return float(np.exp(-np.sum(lam * np.log(lam))))


def vendi_per_n(sources: Sequence[str], embedder=None, n: int | None = None) -> float:
  """Vendi score / n of the sources' embeddings (default: `reference_embedder()`); nan if none.

  n defaults to len(sources); the step metrics also pass the step's environment budget.
  """
  if not sources:
    return float("nan")
  embedder = embedder or reference_embedder()
  return vendi_score(embedder.embed(sources)) / (len(sources) if n is None else n)
