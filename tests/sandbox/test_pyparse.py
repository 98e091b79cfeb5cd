"""Every parse in the package goes through sandbox.pyparse, one thread at a time (CPython 3.11's
AST constructor keeps its recursion counter in interpreter-wide state: two threads parsing at
once failed test_split_hosts.py with "SystemError: AST constructor recursion depth mismatch")."""

import ast
import pathlib
import threading
import time
import types

from spade_jax.sandbox import pyparse
from tests.layering import PACKAGE_ROOT


def test_threads_parse_one_at_a_time(monkeypatch):
  inside, most = [0], [0]

  def slow_parse(source, filename, mode):
    inside[0] += 1
    most[0] = max(most[0], inside[0])
    time.sleep(0.02)
    inside[0] -= 1
    return ast.parse(source, filename=filename, mode=mode)

  monkeypatch.setattr(pyparse, "ast", types.SimpleNamespace(parse=slow_parse))
  threads = [threading.Thread(target=pyparse.parse, args=("x = 1",)) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert most == [1]


def test_nothing_in_the_package_calls_ast_parse_itself():
  callers = [str(p.relative_to(PACKAGE_ROOT)) for p in pathlib.Path(PACKAGE_ROOT).rglob("*.py")
             if "ast.parse(" in p.read_text(encoding="utf-8") and p.name != "pyparse.py"]
  assert callers == []
