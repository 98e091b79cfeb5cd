"""The designer's grounding corpus: documents read from files, shuffled and sharded with grain.

Each designer prompt starts from one passage of a math/science corpus (the paper grounds its
designer in a 15k-document corpus; without it the designer collapses onto a few tasks). Files
are local text, JSONL or Parquet:

* text (`.txt`, `.md`, `.text`): one document per block of lines separated by a blank line;
* JSONL (`.jsonl`, `.json`): one JSON object per line, the document in `corpus.text_field`;
* Parquet (`.parquet`): one row per document, the document in column `corpus.text_field`
  (needs pyarrow).

With no paths configured the built-in docstring corpus of `docs_corpus` is used (nothing is
downloaded). Every host reads the whole document list, keeps its own shard (`index::count`, so
shards are disjoint and cover the corpus) and walks it in a seeded order that is reshuffled
every epoch. The position is a small dict (`get_state` / `set_state`) saved in checkpoints, so
a resumed run continues with the next passage instead of replaying the first ones.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import grain

_FORMAT_BY_SUFFIX = {".txt": "text", ".md": "text", ".text": "text", ".jsonl": "jsonl",
                     ".json": "jsonl", ".parquet": "parquet"}
FORMATS = ("auto", "text", "jsonl", "parquet")


@dataclasses.dataclass(frozen=True)
class Passage:
  """One corpus document as the designer sees it."""

  doc_id: str  # "<file>:<index>" or the docstring corpus id, e.g. "math.gamma"
  text: str  # truncated to corpus.max_chars


def expand_paths(paths: str | Sequence[str]) -> list[str]:
  """Expands globs in order; a pattern that matches nothing is an error."""
  patterns = [paths] if isinstance(paths, str) else list(paths)
  files = []
  for pattern in (p for p in patterns if p):
    matches = sorted(glob.glob(os.path.expanduser(pattern)))
    if not matches:
      raise FileNotFoundError(f"config.corpus.paths: {pattern!r} matches no file")
    files.extend(matches)
  return files


def _file_format(path: str, fmt: str) -> str:
  if fmt != "auto":
    return fmt
  suffix = os.path.splitext(path)[1].lower()
  if suffix not in _FORMAT_BY_SUFFIX:
    raise ValueError(f"corpus file {path!r}: cannot tell its format from the suffix {suffix!r}; "
                     f"expected one of {sorted(_FORMAT_BY_SUFFIX)} or set config.corpus.format")
  return _FORMAT_BY_SUFFIX[suffix]


def _read_text(path: str) -> list[str]:
  with open(path, encoding="utf-8") as f:
    blocks = f.read().split("\n\n")
  return [b.strip() for b in blocks if b.strip()]


def _read_jsonl(path: str, field: str) -> list[str]:
  docs = []
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"corpus file {path!r} line {lineno}: not JSON ({e.msg})") from None
      if not isinstance(row, dict) or not isinstance(row.get(field), str):
        raise ValueError(f"corpus file {path!r} line {lineno}: expected an object with a string "
                         f"field {field!r} (config.corpus.text_field)")
      docs.append(row[field])
  return docs


def _read_parquet(path: str, field: str) -> list[str]:
  try:
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ImportError(f"corpus file {path!r}: reading Parquet needs pyarrow "
                      "(pip install pyarrow)") from None
  table = pq.read_table(path)
  if field not in table.column_names:
    raise ValueError(f"corpus file {path!r}: no column {field!r} (config.corpus.text_field); "
                     f"columns are {table.column_names}")
  return [t for t in table.column(field).to_pylist() if isinstance(t, str)]


def read_documents(paths: str | Sequence[str], fmt: str = "auto",
                   text_field: str = "text") -> list[tuple[str, str]]:
  """Returns (doc_id, text) for every non-empty document of the files, in file order."""
  if fmt not in FORMATS:
    raise ValueError(f"config.corpus.format={fmt!r}; expected one of {FORMATS}")
  readers = {"text": _read_text, "jsonl": lambda p: _read_jsonl(p, text_field),
             "parquet": lambda p: _read_parquet(p, text_field)}
  docs = []
  for path in expand_paths(paths):
    texts = readers[_file_format(path, fmt)](path)
    docs.extend((f"{os.path.basename(path)}:{i}", t) for i, t in enumerate(texts) if t.strip())
  return docs


def default_documents() -> list[tuple[str, str]]:
  """The built-in docstring corpus (built and cached on first use)."""
  from spade_jax.selfplay import docs_corpus  # pylint: disable=import-outside-toplevel
  return [(d["id"], d["text"]) for d in docs_corpus.load_docstring_corpus()]


class Corpus:
  """An endless, per-host shuffled stream of passages with a checkpointable position."""

  def __init__(self, documents: Sequence[tuple[str, str]], *, seed: int = 0,
               max_chars: int = 2000, shard_index: int = 0, shard_count: int = 1):
    if not 0 <= shard_index < shard_count:
      raise ValueError(f"shard_index={shard_index} must be in [0, shard_count={shard_count})")
    if len(documents) < shard_count:
      raise ValueError(f"the corpus has {len(documents)} documents, fewer than the "
                       f"{shard_count} hosts that each need a shard")
    if max_chars < 1:
      raise ValueError(f"config.corpus.max_chars={max_chars} must be >= 1")
    self.num_documents = len(documents)
    self.shard = (shard_index, shard_count)
    shard = grain.MapDataset.source(list(documents))[shard_index::shard_count]
    self.shard_size = len(shard)
    dataset = (shard.shuffle(seed=seed)
               .repeat()
               .map(lambda d: Passage(doc_id=d[0], text=d[1][:max_chars])))
    # In-memory documents, a few passages per refresh: no prefetch threads.
    no_prefetch = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    self._iter = iter(dataset.to_iter_dataset(no_prefetch))

  def next(self) -> Passage:
    return next(self._iter)

  def take(self, n: int) -> list[Passage]:
    return [self.next() for _ in range(n)]

  def get_state(self) -> dict[str, Any]:
    """JSON-serialisable position, with what is needed to reject a mismatched restore."""
    return {"iterator": self._iter.get_state(), "num_documents": self.num_documents,
            "shard": list(self.shard)}

  def set_state(self, state: Mapping[str, Any]) -> None:
    for key, mine in (("num_documents", self.num_documents), ("shard", list(self.shard))):
      if state.get(key) != mine:
        raise ValueError(f"corpus state was saved with {key}={state.get(key)!r} but this run "
                         f"has {key}={mine!r}: the corpus or host layout changed")
    self._iter.set_state(dict(state["iterator"]))


def _host_shard() -> tuple[int, int]:
  import jax  # pylint: disable=import-outside-toplevel
  return jax.process_index(), jax.process_count()


def make_corpus(corpus_config: Mapping[str, Any] | Any,
                shard: tuple[int, int] | None = None) -> Corpus:
  """Builds the corpus described by `config.corpus` for this host (or the given shard)."""
  paths = corpus_config.paths
  paths = [paths] if isinstance(paths, str) else list(paths)
  if any(paths):
    docs = read_documents(paths, corpus_config.format, corpus_config.text_field)
    if not docs:
      raise ValueError(f"config.corpus.paths={tuple(paths)} hold no non-empty document")
  else:
    docs = default_documents()
  index, count = shard if shard is not None else _host_shard()
  return Corpus(docs, seed=corpus_config.seed, max_chars=corpus_config.max_chars,
                shard_index=index, shard_count=count)

