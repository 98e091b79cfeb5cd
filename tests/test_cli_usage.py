"""The package's, the launcher's, scripts/' and the projects' argparse commands print their
usage line as users type the command (`python -m spade_jax.x`, `python scripts/x.py`,
`python -m proj.x`, `python proj/x/scripts/y.py`): argparse's default
is argv[0]'s file name, which under `python -m` is the module's file, not what was typed.
(The absl commands, launch/tpu_run.py and spade_jax.plan, are tested with their --help.)"""

import ast
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND_DIRS = ("spade_jax", "launch", "scripts", "proj")
TYPED = ("python -m spade_jax.", "python scripts/", "python -m proj.", "python proj/")


def _parser_progs() -> dict[str, str | None]:
  """'file:line' -> the `prog` given to each `argparse.ArgumentParser(...)` (None: none)."""
  progs = {}
  for folder in COMMAND_DIRS:
    for path in sorted((REPO_ROOT / folder).rglob("*.py")):
      for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "ArgumentParser"):
          prog = [k.value for k in node.keywords if k.arg == "prog"]
          where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
          progs[where] = ast.literal_eval(prog[0]) if prog else None
  return progs


def test_every_parser_names_its_command_as_typed():
  progs = _parser_progs()
  assert any(where.startswith("proj/starter/scripts/") for where in progs)  # the scan sees them
  untyped = {where: prog for where, prog in progs.items() if not (prog or "").startswith(TYPED)}
  assert untyped == {}
