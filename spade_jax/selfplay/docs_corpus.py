"""The project's default corpus: math and science docstrings of installed libraries.

Nothing is downloaded. One document per public function or class docstring of jax.numpy,
jax.scipy (special, stats and its distributions, linalg), numpy and the standard library's
math, statistics, fractions, cmath, decimal and random modules. Documents come in a fixed
order (module list order, then sorted names) and are cached as JSONL on first use, keyed by
the library versions, so later runs skip the (slow) jax import.

The tiny SentencePiece tokenizer is trained on this corpus (scripts/train_tiny_tokenizer.py)
and the self-play designer reads it as inspiration text.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pathlib
import platform
import re
import types
from importlib import metadata
from typing import Any

# Modules whose public members are harvested, in corpus order.
SOURCE_MODULES: tuple[str, ...] = (
    "jax.numpy", "jax.numpy.linalg", "jax.numpy.fft", "jax.scipy.special", "jax.scipy.stats",
    "jax.scipy.linalg", "numpy", "numpy.linalg", "numpy.fft", "numpy.random", "math",
    "statistics", "fractions", "cmath", "decimal", "random")
# Modules whose submodules are collections of functions (norm.pdf, beta.logpdf, ...).
_RECURSE_INTO = ("jax.scipy.stats",)
MIN_CHARS = 100
MAX_CHARS = 20_000
_FORMAT_VERSION = 1


def cache_dir() -> pathlib.Path:
  """$SPADE_JAX_CACHE, else ~/.cache/spade_jax."""
  root = os.environ.get("SPADE_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "spade_jax")
  return pathlib.Path(root)


def _versions() -> dict[str, str]:
  """What determines the corpus: library versions (from metadata: no jax import) and settings."""
  return {"python": platform.python_version(), "numpy": metadata.version("numpy"),
          "jax": metadata.version("jax"), "format": str(_FORMAT_VERSION),
          "modules": ",".join(SOURCE_MODULES), "chars": f"{MIN_CHARS}-{MAX_CHARS}"}


def _clean(doc: str) -> str:
  """Dedents, strips trailing spaces and collapses runs of blank lines."""
  lines = [line.rstrip() for line in inspect.cleandoc(doc).splitlines()]
  text = "\n".join(lines).strip()
  return re.sub(r"\n{3,}", "\n\n", text)


def _members(module: types.ModuleType) -> list[tuple[str, Any]]:
  """Public callables and classes of a module (plus jax.scipy.stats' distribution modules)."""
  names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
  out = []
  for name in sorted(set(names)):
    obj = getattr(module, name, None)
    if isinstance(obj, types.ModuleType):
      if module.__name__ in _RECURSE_INTO and obj.__name__.startswith(module.__name__ + "."):
        out.extend((f"{name}.{sub}", member) for sub, member in _members(obj))
    elif callable(obj):
      out.append((name, obj))
  return out


def build_docstring_corpus() -> list[dict[str, str]]:
  """Harvests the docstrings (imports jax, numpy and the standard library modules)."""
  docs, seen = [], set()
  for module_name in SOURCE_MODULES:
    module = importlib.import_module(module_name)
    for name, obj in _members(module):
      raw = getattr(obj, "__doc__", None)
      if not isinstance(raw, str):
        continue
      text = _clean(raw)[:MAX_CHARS]
      digest = hashlib.sha1(text.encode()).hexdigest()
      if len(text) < MIN_CHARS or digest in seen:
        continue
      seen.add(digest)
      docs.append({"id": f"{module_name}.{name}", "source": module_name, "text": text})
  return docs


def load_docstring_corpus(cache: str | os.PathLike[str] | None = None) -> list[dict[str, str]]:
  """Returns the corpus as [{id, source, text}], building and caching it on first use.

  Args:
    cache: directory for the JSONL cache; defaults to `cache_dir()`.
  """
  versions = _versions()
  key = hashlib.sha1(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:12]
  path = pathlib.Path(cache or cache_dir()) / f"docstrings-{key}.jsonl"
  if path.exists():
    with path.open(encoding="utf-8") as f:
      return [json.loads(line) for line in f]
  docs = build_docstring_corpus()
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(f".tmp{os.getpid()}")
  with tmp.open("w", encoding="utf-8") as f:
    for doc in docs:
      f.write(json.dumps(doc, ensure_ascii=False) + "\n")
  os.replace(tmp, path)  # atomic: concurrent builders never see a partial file
  return docs
