"""`ast.parse` for the host process, one thread at a time.

CPython 3.11 keeps the AST constructor's recursion counter in interpreter-wide state, so two
threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905): seen when two emulated hosts (threads) validated designs together.
Every parse in the package (environments' sources, a model's tool calls) goes through
`parse`, which holds one lock for the call; a parse takes microseconds to milliseconds, so
the lock costs nothing that matters.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
  """ast.parse(source, filename, mode), serialised across the process's threads."""
  with _LOCK:
    return ast.parse(source, filename=filename, mode=mode)
