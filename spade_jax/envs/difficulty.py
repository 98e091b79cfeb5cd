"""Difficulty levels of an environment source (the contract's optional `difficulty_levels`).

An environment that declares `difficulty_levels = N` reads the class attribute `difficulty`
(0 = easiest, N - 1 = hardest) in `reset`. `at_level` pins a level by appending one
assignment to the source, so a level is just another source text: the sandbox runs it like
any other, and an exported curriculum line carries it whole.

Plain Python: this module never imports jax or the model.
"""

from __future__ import annotations

import ast

from spade_jax.sandbox import pyparse


def _class_node(source: str) -> ast.ClassDef:
  classes = [n for n in pyparse.parse(source).body if isinstance(n, ast.ClassDef)]
  if len(classes) != 1:
    raise ValueError(f"expected exactly one top-level class in the source, found {len(classes)}")
  return classes[0]


def declared_levels(source: str) -> int | None:
  """The int literal assigned to `difficulty_levels` in the class body, or None."""
  for node in _class_node(source).body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "difficulty_levels"
        and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
      return node.value.value
  return None


def at_level(source: str, level: int) -> str:
  """The source with `<Class>.difficulty = level` appended; the level must be declared."""
  levels = declared_levels(source)
  if levels is None or not 0 <= level < levels:
    raise ValueError(f"difficulty level {level} is not in [0, {levels}) for this source "
                     "(difficulty_levels)")
  return f"{source.rstrip()}\n\n\n{_class_node(source).name}.difficulty = {level}\n"
