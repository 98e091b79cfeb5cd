"""Reads a package's imports from its source (module-level and function-level alike)."""

from __future__ import annotations

import ast
import pathlib

import spade_jax

PACKAGE_ROOT = pathlib.Path(spade_jax.__file__).parent


def imports_of(subpackage: str) -> dict[str, set[str]]:
  """{file relative to spade_jax/: every module it imports anywhere in its body}."""
  found = {}
  for path in sorted((PACKAGE_ROOT / subpackage).rglob("*.py")):
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
      if isinstance(node, ast.Import):
        names.update(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names.add(node.module)
        names.update(f"{node.module}.{alias.name}" for alias in node.names)
    found[str(path.relative_to(PACKAGE_ROOT))] = names
  return found


def violations(subpackage: str, allowed) -> list[str]:
  """'file: module' for each import that `allowed(module)` refuses."""
  return [f"{path}: {name}" for path, names in imports_of(subpackage).items()
          for name in sorted(names) if not allowed(name)]


def under(name: str, prefixes) -> bool:
  return any(name == p or name.startswith(p + ".") for p in prefixes)
