"""Imports the modules (or compiles the scripts) of the documented commands, in one process.

    python tests/docs_probe.py '[{"key": ..., "module" | "script": ..., "help": [args]}, ...]'

For each job: `module` is imported (`script` compiled); with `help`, it then runs as
`__main__` with those arguments (a subcommand and `--help`), its output captured. Prints one
JSON object {key: {"error": str | None, "code": exit status, "out": stdout + stderr}}. One
process for all of them, so jax and the package are imported once (tests/test_docs_commands.py).
"""

import contextlib
import importlib
import io
import json
import runpy
import sys
import traceback
import warnings


def probe(job: dict) -> dict:
  out = io.StringIO()
  code = 0
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
      if "module" in job:
        importlib.import_module(job["module"])
      else:
        with open(job["script"], encoding="utf-8") as f:
          compile(f.read(), job["script"], "exec")
      if job.get("help"):
        sys.argv = [job.get("module") or job["script"], *job["help"]]
        try:
          if "module" in job:
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
          else:
            runpy.run_path(job["script"], run_name="__main__")
        except SystemExit as e:
          code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except Exception as e:  # noqa: BLE001 - reported per job: the module does not import
    return {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}",
            "code": None, "out": out.getvalue()}
  return {"error": None, "code": code, "out": out.getvalue()}


def main() -> None:
  warnings.simplefilter("ignore")  # runpy's "found in sys.modules" and friends
  results = {job["key"]: probe(job) for job in json.loads(sys.argv[1])}
  sys.__stdout__.write(json.dumps(results) + "\n")


if __name__ == "__main__":
  main()
