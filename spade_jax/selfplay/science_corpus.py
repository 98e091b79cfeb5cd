"""The default corpus: math and science passages cut from installed scientific packages' docs.

Nothing is downloaded. The documentation that sympy (its physics, number theory,
combinatorics, geometry, statistics, ... modules), scipy (special functions, statistics,
constants, integration, optimisation, signal, ...), mpmath, networkx's algorithms and numpy
carry in their module, class, function and method docstrings is cut into passages:

* a docstring is split at its section headings (numpydoc / reST underlined titles, mpmath's
  `**Bold**` titles); sections that are reference tables (Parameters, Returns, Raises, See
  Also, References, ...) are dropped, prose sections (the description, Notes, Explanation,
  the prose of Examples) are kept;
* doctest transcripts (`>>>` / `...` lines and their output), reST tables (grid and
  simple), literal blocks after `::`, call-signature lines and Sphinx bookkeeping directives
  are removed;
* a kept section is one passage, or several cut at paragraph boundaries when it is longer
  than MAX_PASSAGE_CHARS; passages shorter than MIN_PASSAGE_CHARS are dropped, and a passage
  whose normalised text was seen before is dropped as a duplicate;
* an object is documented where it is defined (a name a module imports from elsewhere is
  left to its home module), and each passage is tagged with its source (one of SOURCES'
  names) and that module, and starts with the documented object's qualified name.

The result comes in a fixed order and is cached as JSONL on first build, keyed by the package
versions and the build settings, so later loads only read the file (no jax, no scipy import).
The cache file starts with a header holding the document count and a checksum: a damaged
file is rebuilt with a warning, and builders write it atomically (see `_write_cache`).
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import inspect
import json
import os
import pathlib
import pkgutil
import platform
import re
import socket
import types
import warnings
from collections.abc import Iterator
from importlib import metadata

import numpy as np

# (source name, module trees walked in order); each tree is the module and its public
# submodules (no tests, no private modules).
SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sympy.physics", ("sympy.physics",)),
    ("sympy.ntheory", ("sympy.ntheory",)),
    ("sympy.combinatorics", ("sympy.combinatorics",)),
    ("sympy.geometry", ("sympy.geometry",)),
    ("sympy.stats", ("sympy.stats",)),
    ("sympy", ("sympy.functions", "sympy.integrals", "sympy.series", "sympy.solvers",
               "sympy.polys", "sympy.matrices", "sympy.sets", "sympy.logic", "sympy.calculus",
               "sympy.discrete", "sympy.concrete", "sympy.tensor", "sympy.vector",
               "sympy.holonomic", "sympy.simplify", "sympy.core", "sympy.crypto",
               "sympy.assumptions", "sympy.algebras", "sympy.categories", "sympy.diffgeom",
               "sympy.liealgebras", "sympy.codegen", "sympy.utilities.iterables",
               "sympy.sandbox")),
    ("scipy.special", ("scipy.special",)),
    ("scipy.stats", ("scipy.stats",)),
    ("scipy.constants", ("scipy.constants",)),
    ("scipy.integrate", ("scipy.integrate",)),
    ("scipy.optimize", ("scipy.optimize",)),
    ("scipy.signal", ("scipy.signal",)),
    ("scipy", ("scipy.linalg", "scipy.spatial", "scipy.interpolate", "scipy.fft",
               "scipy.sparse", "scipy.cluster", "scipy.ndimage", "scipy.odr",
               "scipy.differentiate")),
    ("mpmath", ("mpmath",)),
    ("networkx", ("networkx.algorithms", "networkx.generators", "networkx.linalg",
                  "networkx.classes")),
    ("numpy", ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.polynomial", "numpy.ma",
               "numpy.lib")),
)
PACKAGES = ("sympy", "scipy", "mpmath", "networkx", "numpy")  # their versions key the cache
MIN_PASSAGE_CHARS = 90
MAX_PASSAGE_CHARS = 400
# Section titles whose body is a reference table, not prose (compared lower-cased).
DROPPED_SECTIONS = frozenset({
    "parameters", "other parameters", "arguments", "keyword arguments", "args", "kwargs",
    "returns", "return", "yields", "raises", "warns", "attributes", "methods", "see also",
    "references", "reference", "footnotes", "index", "contents", "functions", "classes",
    "options", "keywords", "members", "array api standard support"})
_FORMAT_VERSION = 3  # bump when a cleaning or cutting rule or the file changes: it keys the cache
# Submodules that hold tests, build tools or typing stubs, not mathematics.
_SKIPPED_PARTS = ("tests", "testing", "benchmarks", "conftest", "setup", "f2py", "distutils",
                  "typing", "ctypeslib", "matlib", "compat", "doc")
_UNDERLINE = re.compile(r"^\s*([=\-~^*+#])\1{2,}\s*$")
_BOLD_TITLE = re.compile(r"^\s*\*\*([A-Za-z][A-Za-z ]{1,40})\*\*:?\s*$")
_SIGNATURE = re.compile(r"^\s*[A-Za-z_][\w.]*\(.*\)(\s*->.*)?\s*$")  # "f(x, /, out=None)"
_DOCTEST = re.compile(r"^\s*(>>>|\.\.\.)(\s|$)")
_TABLE = re.compile(r"^\s*[+|].*[+|]\s*$")
_SIMPLE_TABLE_BORDER = re.compile(r"^\s*(?:[=-]{2,}\s+)+[=-]{2,}\s*$")
_DIRECTIVE = re.compile(r"^\s*\.\. (\w[\w-]*) ?::")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_KEPT_DIRECTIVES = ("math", "note", "warning", "admonition")
_MEMBER_TYPES = (types.FunctionType, property, staticmethod, classmethod,
                 types.MethodDescriptorType, types.GetSetDescriptorType)


def cache_dir() -> pathlib.Path:
  """$SPADE_JAX_CACHE, else ~/.cache/spade_jax."""
  root = os.environ.get("SPADE_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "spade_jax")
  return pathlib.Path(root)


def build_key() -> dict[str, str]:
  """What determines the corpus: package versions (from metadata, nothing imported), settings."""
  key = {p: metadata.version(p) for p in PACKAGES}
  key.update(python=platform.python_version(), format=str(_FORMAT_VERSION),
             sources=json.dumps(SOURCES), chars=f"{MIN_PASSAGE_CHARS}-{MAX_PASSAGE_CHARS}")
  return key


# ----------------------------------------------------------------------------- cleaning
def _drop_intro(out: list[str]) -> None:
  """Pops a trailing paragraph that ends with ':' (it introduced what was just dropped)."""
  end = len(out)
  while end and not out[end - 1].strip():
    end -= 1
  if end and out[end - 1].rstrip().endswith(":"):
    start = end
    while start and out[start - 1].strip():
      start -= 1
    del out[start:]


def _drop_doctests(lines: list[str]) -> list[str]:
  """Removes `>>>` / `...` lines and the output lines that follow them up to a blank line."""
  out, in_transcript = [], False
  for line in lines:
    if _DOCTEST.match(line):
      in_transcript = True
    elif not line.strip():
      in_transcript = False
      out.append(line)
    elif not in_transcript:
      out.append(line)
  return out


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def _drop_tables_and_directives(lines: list[str]) -> list[str]:
  """Removes reST tables (grid and simple), literal blocks after '::' and the bodies of
  bookkeeping directives (keeps .. math:: and admonitions)."""
  out, skip_indent, in_table = [], None, False
  for i, line in enumerate(lines):
    if skip_indent is not None:
      if not line.strip() or _indent(line) > skip_indent:
        continue
      skip_indent = None
      out.append("")  # the skipped block separated two paragraphs
    if _SIMPLE_TABLE_BORDER.match(line):  # ===  === borders open and close a simple table
      after = lines[i + 1] if i + 1 < len(lines) else ""
      in_table = not (in_table and not after.strip())
      continue
    if in_table:
      continue
    directive = _DIRECTIVE.match(line)
    if directive and directive.group(1) not in _KEPT_DIRECTIVES:
      skip_indent = _indent(line)
    elif line.rstrip().endswith("::"):  # a literal (code) block follows, indented
      skip_indent = _indent(line)
      text = line.rstrip()[:-1].rstrip()
      if text.strip() not in ("", ":"):
        out.append(text)
      else:
        _drop_intro(out)
    elif not _TABLE.match(line):
      out.append(line)
  return out


def split_sections(doc: str) -> list[tuple[str, str]]:
  """[(title, body)] of a cleaned docstring; the text before the first heading has title ""."""
  lines = inspect.cleandoc(doc).splitlines()
  sections, title, body = [], "", []
  i = 0
  while i < len(lines):
    line = lines[i]
    underlined = (i + 1 < len(lines) and line.strip() and _UNDERLINE.match(lines[i + 1])
                  and len(lines[i + 1].strip()) >= len(line.strip()) - 1)
    bold = _BOLD_TITLE.match(line)
    if underlined or bold:
      sections.append((title, body))
      title, body = (line.strip() if underlined else bold.group(1)), []
      i += 2 if underlined else 1
      continue
    if not _UNDERLINE.match(line) and not (title == "" and _SIGNATURE.match(line)):
      body.append(line)
    i += 1
  sections.append((title, body))
  out = []
  for title, body in sections:
    kept = _drop_tables_and_directives(_drop_doctests(body))
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(x.rstrip() for x in kept)).strip()
    if text:
      out.append((title, text))
  return out


def _pieces(paragraph: str, max_chars: int) -> list[str]:
  """A paragraph, or its sentences when it is longer than max_chars (then cut hard)."""
  if len(paragraph) <= max_chars:
    return [paragraph]
  return [x[i:i + max_chars] for x in _SENTENCE_END.split(paragraph)
          for i in range(0, len(x), max_chars)]


def cut_passages(text: str, max_chars: int | None = None) -> list[str]:
  """Packs paragraphs (sentences of long ones) into passages of at most max_chars."""
  max_chars = max_chars or MAX_PASSAGE_CHARS
  out, current = [], ""
  for para in (p.strip() for p in text.split("\n\n")):
    for j, piece in enumerate(_pieces(para, max_chars) if para else ()):
      sep = " " if j else "\n\n"  # sentences of one paragraph join with a space
      if current and len(current) + len(sep) + len(piece) > max_chars:
        out.append(current)
        current = piece
      else:
        current = f"{current}{sep}{piece}" if current else piece
  if current:
    out.append(current)
  return out


def docstring_passages(doc: str) -> list[str]:
  """The prose passages of one docstring (rules in the module docstring)."""
  out = []
  for title, text in split_sections(doc):
    if title.lower().rstrip(":") not in DROPPED_SECTIONS:
      out.extend(p for p in cut_passages(text) if len(p) >= MIN_PASSAGE_CHARS)
  return out


# ---------------------------------------------------------------------------- harvesting
def _walk(root: str) -> Iterator[types.ModuleType]:
  """The module and its public submodules, in sorted order; unimportable ones are skipped."""
  module = importlib.import_module(root)
  yield module
  if not hasattr(module, "__path__"):
    return
  names = sorted(info.name for info in pkgutil.walk_packages(module.__path__, root + ".",
                                                             onerror=lambda _: None))
  for name in names:
    parts = name.split(".")
    if any(p.startswith(("_", "test")) or p in _SKIPPED_PARTS for p in parts):
      continue
    try:
      yield importlib.import_module(name)
    except Exception:  # pylint: disable=broad-except
      continue  # a submodule that needs an optional dependency (matplotlib, pyglet, ...)


def _home(obj: object, module: types.ModuleType) -> str:
  """The module an object was defined in (an instance's: its class's). A ufunc says "numpy"
  wherever it was written, so it belongs to the module that exports it."""
  if isinstance(obj, np.ufunc):
    return module.__name__
  home = getattr(obj, "__module__", None)
  return home if isinstance(home, str) else type(obj).__module__


def _documented(module: types.ModuleType, root: str) -> Iterator[tuple[str, object]]:
  """(qualified name, object) of the module and the public functions, classes and methods it
  defines under `root` (a name imported from elsewhere is documented at its home)."""
  yield module.__name__, module
  names = getattr(module, "__all__", None)
  if not isinstance(names, (list, tuple)):
    names = [n for n in vars(module) if not n.startswith("_")]
  for name in sorted({n for n in names if isinstance(n, str)}):
    obj = getattr(module, name, None)
    if (obj is None or isinstance(obj, types.ModuleType) or not callable(obj)
        or not (_home(obj, module) + ".").startswith(root + ".")):
      continue
    yield f"{module.__name__}.{name}", obj
    if inspect.isclass(obj):
      for attr, member in sorted(vars(obj).items()):
        if not attr.startswith("_") and isinstance(member, _MEMBER_TYPES):
          yield f"{module.__name__}.{name}.{attr}", member


def _docstring(obj: object) -> str | None:
  if isinstance(obj, (staticmethod, classmethod)):
    obj = obj.__func__
  doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
  return doc if isinstance(doc, str) else None


def _fingerprint(text: str) -> str:
  return hashlib.sha1(" ".join(text.lower().split()).encode()).hexdigest()


def build_corpus() -> list[dict[str, str]]:
  """Harvests every source (imports the packages); [{id, source, module, text}] in order."""
  docs, seen_docs, seen_passages = [], set(), set()
  per_name: collections.Counter[str] = collections.Counter()
  with warnings.catch_warnings(record=True):  # deprecation notices of module imports
    for source, roots in SOURCES:
      for root in roots:
        for module in _walk(root):
          for name, obj in _documented(module, root):
            doc = _docstring(obj)
            if not doc or _fingerprint(doc) in seen_docs:
              continue
            seen_docs.add(_fingerprint(doc))
            for passage in docstring_passages(doc):
              if _fingerprint(passage) in seen_passages:
                continue
              seen_passages.add(_fingerprint(passage))
              per_name[name] += 1  # two objects can share a name (a module and its function)
              docs.append({"id": f"{name}#{per_name[name] - 1}", "source": source,
                           "module": module.__name__, "text": f"{name}\n\n{passage}"})
  return docs


def cache_path(cache: str | os.PathLike[str] | None = None) -> pathlib.Path:
  key = hashlib.sha1(json.dumps(build_key(), sort_keys=True).encode()).hexdigest()[:12]
  return pathlib.Path(cache or cache_dir()) / f"science-{key}.jsonl"


def load_corpus(cache: str | os.PathLike[str] | None = None) -> list[dict[str, str]]:
  """The corpus as [{id, source, module, text}], built and cached on first use.

  A cache file that fails its check (truncated, edited, not ours) is reported with a
  warning naming it and rebuilt, never used.

  Args:
    cache: directory of the JSONL cache; defaults to `cache_dir()`.
  """
  path = cache_path(cache)
  if path.exists():
    docs, damage = _read_cache(path)
    if damage is None:
      return docs
    warnings.warn(f"the corpus cache {path} is damaged ({damage}); rebuilding it", stacklevel=2)
  docs = build_corpus()
  _write_cache(path, docs)
  return docs


# The cache file: a header line {"corpus": _CACHE_TAG, "documents": N, "sha256": ...} whose
# digest covers the N JSON lines that follow.
_CACHE_TAG = "spade_jax science corpus"


def _read_cache(path: pathlib.Path) -> tuple[list[dict[str, str]], str | None]:
  """(documents, None), or ([], what is wrong with the file)."""
  head, _, body = path.read_bytes().partition(b"\n")
  try:
    header = json.loads(head)
    if not (isinstance(header, dict) and header.get("corpus") == _CACHE_TAG):
      return [], "its first line is not the corpus header"
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
      return [], (f"its {len(body)} bytes of documents do not match the header's checksum: "
                  "truncated or altered")
    docs = [json.loads(line) for line in body.decode("utf-8").splitlines()]
  except ValueError as exc:  # JSON and UTF-8 decoding errors
    return [], f"unreadable: {exc}"
  if len(docs) != header.get("documents"):
    return [], f"{len(docs)} documents, its header says {header.get('documents')}"
  return docs, None


def _write_cache(path: pathlib.Path, docs: list[dict[str, str]]) -> None:
  """Writes the cache atomically: a temporary file of this host and process, then a rename.

  Processes building at once (the processes of a multi-process run, hosts sharing a home
  directory) each write their own temporary file, so a reader sees a whole file or none.
  """
  body = "".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in docs).encode("utf-8")
  header = {"corpus": _CACHE_TAG, "documents": len(docs),
            "sha256": hashlib.sha256(body).hexdigest()}
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
  try:
    with tmp.open("wb") as f:
      f.write(json.dumps(header).encode() + b"\n" + body)
      f.flush()
      os.fsync(f.fileno())  # the data is on disk before the name points at it
    os.replace(tmp, path)
  finally:
    tmp.unlink(missing_ok=True)
