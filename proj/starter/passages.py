"""A fixed, disjoint split of the built-in science corpus into training and held-out passages.

A document is held out when the hash of its id falls in one of HELDOUT_BUCKETS of
BUCKETS buckets, so the split is deterministic, needs no stored list, and does not move
when documents are added elsewhere in the corpus. The designer's supervised examples use
only the training side; the starter's designer gate uses only the held-out side.
"""

from __future__ import annotations

import hashlib

from spade_jax.selfplay import corpus

BUCKETS = 10
HELDOUT_BUCKETS = 1  # one document in ten is held out

Document = tuple[str, str, str]  # (doc_id, text, origin) as corpus.default_documents gives


def _hash(doc_id: str) -> int:
  return int(hashlib.sha256(doc_id.encode()).hexdigest()[:15], 16)


def is_heldout(doc_id: str) -> bool:
  return _hash(doc_id) % BUCKETS < HELDOUT_BUCKETS


def split_documents() -> tuple[list[Document], list[Document]]:
  """(training documents, held-out documents), each in corpus order."""
  docs = corpus.default_documents()
  return ([d for d in docs if not is_heldout(d[0])], [d for d in docs if is_heldout(d[0])])


def train_passages() -> list[str]:
  """Texts of the training documents (the designer examples cut them as the loop does)."""
  return [text for _, text, _ in split_documents()[0]]


def heldout_passages(n: int) -> list[str]:
  """n held-out texts in a fixed order that mixes the sources; none is used in training."""
  heldout = sorted(split_documents()[1], key=lambda d: _hash(d[0]))
  if not 0 <= n <= len(heldout):
    raise ValueError(f"asked for {n} held-out passages; the corpus holds {len(heldout)}")
  return [text for _, text, _ in heldout[:n]]
