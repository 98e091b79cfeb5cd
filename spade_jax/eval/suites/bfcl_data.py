"""BFCL v4 multi-turn: the data, function docs and executable backends of `bfcl-eval`,
and the check that decides which call strings may run on the backends.

Only the package's data files, `func_source_code` backends and `multi_turn_checker` are
used (they import without the package's heavy declared dependencies). Files:
`bfcl_eval/data/BFCL_v4_<category>.json` (one JSON case a line), `possible_answer/` (the
ground-truth calls per turn) and `multi_turn_func_doc/<class file>.json` (one function doc
a line).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import pathlib

import bfcl_eval
from bfcl_eval.constants.executable_backend_config import (
  CLASS_FILE_PATH_MAPPING,
  MULTI_TURN_FUNC_DOC_FILE_MAPPING,
)

from spade_jax.sandbox import pyparse

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
              "multi_turn_long_context")
REFUSED = "__refused_call__()"  # runs in place of a call that is not plain: an unknown name
DATA_DIR = pathlib.Path(bfcl_eval.__file__).parent / "data"


def _jsonl(path: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@functools.cache
def cases(category: str) -> tuple[dict, ...]:
  """The category's test cases, each with its "ground_truth" (calls per turn) merged in."""
  entries = _jsonl(DATA_DIR / f"BFCL_v4_{category}.json")
  answers = {a["id"]: a["ground_truth"] for a in
             _jsonl(DATA_DIR / "possible_answer" / f"BFCL_v4_{category}.json")}
  return tuple(dict(e, ground_truth=answers[e["id"]]) for e in entries)


@functools.cache
def function_docs(class_name: str) -> tuple[dict, ...]:
  return tuple(_jsonl(DATA_DIR / "multi_turn_func_doc" /
                      MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


@functools.cache
def method_names(class_name: str) -> frozenset[str]:
  """Public methods of a backend class: the only names a checked call may name."""
  cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
  return frozenset(n for n, _ in inspect.getmembers(cls, inspect.isfunction)
                   if not n.startswith("_"))


def case_methods(case: dict) -> frozenset[str]:
  return frozenset().union(*(method_names(c) for c in case["involved_classes"]))


def is_plain_call(call: str, names: frozenset[str]) -> bool:
  """`name(literal, key=literal, ...)` with `name` a backend method."""
  try:
    node = pyparse.parse(call.strip(), mode="eval").body
  except (SyntaxError, ValueError):
    return False
  if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in names):
    return False
  try:
    for value in [*node.args, *(k.value for k in node.keywords)]:
      ast.literal_eval(value)
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    return False
  return all(k.arg is not None for k in node.keywords)


def safe_call(call, names: frozenset[str]) -> str:
  """`call` when it is a plain call string, else REFUSED."""
  return call if isinstance(call, str) and is_plain_call(call, names) else REFUSED
