"""The designer's grounding corpus: documents read from files, shuffled and sharded with grain.

Each designer prompt starts from one passage of a math/science corpus (the paper grounds its
designer in a 15k-document corpus; without it the designer collapses onto a few tasks). User
corpora are local text, JSONL or Parquet files:

* text (`.txt`, `.md`, `.text`): one document per block of lines separated by a blank line;
* JSONL (`.jsonl`, `.json`): one JSON object per line, the document in `corpus.text_field`;
* Parquet (`.parquet`): one row per document, the document in column `corpus.text_field`
  (needs pyarrow).

With no paths configured the built-in corpus of `science_corpus` is used: passages of the
documentation of sympy, scipy, mpmath, networkx and numpy (nothing is downloaded). Each
passage carries its origin ("the documentation of <module>" / "the corpus file <name>"),
which the designer prompt names. Every host reads the whole document list, keeps its own
shard (`index::count`, so shards are disjoint and cover the corpus) and walks it in a seeded
order that is reshuffled every epoch. The position is a small dict (`state_dict` /
`load_state_dict`) saved in checkpoints, so a resumed run continues with the next passage instead of
replaying the first ones.

  python -m spade_jax.selfplay.corpus stats [--paths FILE ...]

prints the document count, passage length percentiles and the share of each source (of the
built-in corpus, building and caching it if needed, or of the given files). It imports
neither jax nor grain (grain imports jax), so it answers in seconds once the cache exists.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import glob
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spade_jax.checks import from_section, is_int, require
from spade_jax.selfplay import science_corpus

_FORMAT_BY_SUFFIX = {".txt": "text", ".md": "text", ".text": "text", ".jsonl": "jsonl",
                     ".json": "jsonl", ".parquet": "parquet"}
FORMATS = ("auto", "text", "jsonl", "parquet")


@dataclasses.dataclass(frozen=True)
class Passage:
  """One corpus document as the designer sees it."""

  doc_id: str  # "<file>:<index>" or the built-in corpus id, e.g. "sympy.ntheory.totient#0"
  text: str  # truncated to corpus.max_chars
  origin: str = "the corpus"  # where it comes from, as the designer prompt names it


DEFAULT_MAX_CHARS = 2000  # config.corpus.max_chars' default (CorpusConfig)


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
  """`config.corpus`: where the designer's passages come from and how long they are."""

  paths: tuple[str, ...] = ()  # files / globs (text, JSONL, Parquet); () = built-in science corpus
  format: str = "auto"  # "auto" (by suffix), "text", "jsonl" or "parquet"
  text_field: str = "text"  # JSONL key / Parquet column holding the document
  max_chars: int = DEFAULT_MAX_CHARS  # passages are cut to this many characters
  seed: int = 0  # shuffle seed (reshuffled every epoch)

  def __post_init__(self):
    if isinstance(self.paths, str):  # one path or glob
      object.__setattr__(self, "paths", (self.paths,) if self.paths else ())
    require(isinstance(self.paths, tuple) and all(isinstance(p, str) for p in self.paths),
            "corpus.paths", self.paths, "a tuple of file paths or globs")
    require(self.format in FORMATS, "corpus.format", self.format, f"one of {FORMATS}")
    require(isinstance(self.text_field, str) and self.text_field != "", "corpus.text_field",
            self.text_field, "a non-empty string")
    require(is_int(self.max_chars) and self.max_chars >= 1, "corpus.max_chars", self.max_chars,
            "an int >= 1")
    require(is_int(self.seed), "corpus.seed", self.seed, "an int")

  @classmethod
  def from_config(cls, corpus: Mapping[str, Any] | Any) -> CorpusConfig:
    """The struct of `config.corpus` (a ConfigDict or a mapping)."""
    return from_section(cls, corpus, "corpus")


def passage_of(document: tuple[str, str, str], max_chars: int = DEFAULT_MAX_CHARS) -> Passage:
  """What the designer sees of one (doc_id, text, origin) document: its text cut to max_chars."""
  doc_id, text, origin = document
  return Passage(doc_id=doc_id, text=text[:max_chars], origin=origin)


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
                   text_field: str = "text") -> list[tuple[str, str, str]]:
  """(doc_id, text, origin) of every non-empty document of the files, in file order."""
  if fmt not in FORMATS:
    raise ValueError(f"config.corpus.format={fmt!r}; expected one of {FORMATS}")
  readers = {"text": _read_text, "jsonl": lambda p: _read_jsonl(p, text_field),
             "parquet": lambda p: _read_parquet(p, text_field)}
  docs = []
  for path in expand_paths(paths):
    texts = readers[_file_format(path, fmt)](path)
    name = os.path.basename(path)
    docs.extend((f"{name}:{i}", t, f"the corpus file {name}") for i, t in enumerate(texts)
                if t.strip())
  return docs


def default_documents() -> list[tuple[str, str, str]]:
  """The built-in science corpus as (doc_id, text, origin) (built and cached on first use)."""
  return [(d["id"], d["text"], f"the documentation of {d['module']}")
          for d in science_corpus.load_corpus()]


class Corpus:
  """An endless, per-host shuffled stream of passages with a checkpointable position."""

  def __init__(self, documents: Sequence[tuple[str, str, str]], *, seed: int = 0,
               max_chars: int = DEFAULT_MAX_CHARS, shard_index: int = 0, shard_count: int = 1):
    if not 0 <= shard_index < shard_count:
      raise ValueError(f"shard_index={shard_index} must be in [0, shard_count={shard_count})")
    if len(documents) < shard_count:
      raise ValueError(f"the corpus has {len(documents)} documents, fewer than the "
                       f"{shard_count} hosts that each need a shard")
    if max_chars < 1:
      raise ValueError(f"config.corpus.max_chars={max_chars} must be >= 1")
    import grain  # pylint: disable=import-outside-toplevel  # imports jax: only when streaming
    self.num_documents = len(documents)
    self.shard = (shard_index, shard_count)
    shard = grain.MapDataset.source(list(documents))[shard_index::shard_count]
    self.shard_size = len(shard)
    dataset = (shard.shuffle(seed=seed)
               .repeat()
               .map(functools.partial(passage_of, max_chars=max_chars)))
    # In-memory documents, a few passages per refresh: no prefetch threads.
    no_prefetch = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    self._iter = iter(dataset.to_iter_dataset(no_prefetch))

  def next(self) -> Passage:
    return next(self._iter)

  def take(self, n: int) -> list[Passage]:
    return [self.next() for _ in range(n)]

  def state_dict(self) -> dict[str, Any]:
    """JSON-serialisable position, with what is needed to reject a mismatched restore."""
    return {"iterator": self._iter.get_state(), "num_documents": self.num_documents,
            "shard": list(self.shard)}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    for key, mine in (("num_documents", self.num_documents), ("shard", list(self.shard))):
      if state.get(key) != mine:
        raise ValueError(f"corpus state was saved with {key}={state.get(key)!r} but this run "
                         f"has {key}={mine!r}: the corpus or host layout changed")
    self._iter.set_state(dict(state["iterator"]))


def _host_shard() -> tuple[int, int]:
  import jax  # pylint: disable=import-outside-toplevel
  return jax.process_index(), jax.process_count()


def make_corpus(corpus_config: CorpusConfig, shard: tuple[int, int] | None = None) -> Corpus:
  """Builds the corpus described by `config.corpus` for this host (or the given shard)."""
  paths = list(corpus_config.paths)
  if any(paths):
    docs = read_documents(paths, corpus_config.format, corpus_config.text_field)
    if not docs:
      raise ValueError(f"config.corpus.paths={tuple(paths)} hold no non-empty document")
  else:
    docs = default_documents()
  index, count = shard if shard is not None else _host_shard()
  return Corpus(docs, seed=corpus_config.seed, max_chars=corpus_config.max_chars,
                shard_index=index, shard_count=count)



def corpus_stats(documents: Sequence[tuple[str, str, str]],
                 sources: Sequence[str] | None = None) -> dict[str, Any]:
  """Document count, length percentiles (characters) and each source's share of documents."""
  lengths = np.array([len(d[1]) for d in documents])
  labels = sources if sources is not None else [d[2] for d in documents]
  counts = collections.Counter(labels)
  pcts = (5, 25, 50, 75, 95)
  values = np.percentile(lengths, pcts).tolist() if len(lengths) else []
  return {"documents": len(documents),
          "length_percentiles": dict(zip(pcts, values, strict=False)),
          "share": {s: n / len(documents) for s, n in counts.most_common()}}


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m spade_jax.selfplay.corpus",
                                   description="Statistics of the designer's corpus.")
  parser.add_argument("command", choices=["stats"])
  parser.add_argument("--paths", nargs="*", default=(), help="corpus files (default: built-in)")
  parser.add_argument("--format", default="auto", choices=FORMATS)
  parser.add_argument("--text-field", default="text")
  args = parser.parse_args(argv)
  if args.paths:
    docs = read_documents(args.paths, args.format, args.text_field)
    stats = corpus_stats(docs)
  else:
    rows = science_corpus.load_corpus()
    docs = [(d["id"], d["text"], d["module"]) for d in rows]
    stats = corpus_stats(docs, [d["source"] for d in rows])
  print(f"documents: {stats['documents']}")
  print("length (characters): " + ", ".join(
      f"p{p} {v:.0f}" for p, v in stats["length_percentiles"].items()))
  print("share per source:")
  for source, share in stats["share"].items():
    print(f"  {source:<24} {share:7.2%}")


if __name__ == "__main__":
  main()
