"""The lists in docs/ that drift stay the code's: files per package, the self-play loop's
imports and checkpoint state keys, `StepRecord` / `EnvReport` fields, the workdir layout,
the README's summary of the games run and its Layout tree, and bench/RESULTS.md's table per
benchmark.

Each list is read from the doc as written (a table's first column, or one marked sentence)
and compared both ways with what the code has, so a file, field or key added, renamed or
removed on either side fails here with the difference named.
"""

import ast
import dataclasses
import re
import subprocess

import pytest

from spade_jax import config_schema
from spade_jax.envs.library import GAME_CATEGORIES
from spade_jax.metrics.env_log import LOG_NAME
from spade_jax.model.checkpoint_format import MODEL_CONFIG_FILE
from spade_jax.model.load import RUN_CONFIG_FILE
from spade_jax.selfplay.record import EnvReport, StepRecord
from tests.layering import PACKAGE_ROOT, imports_of, under

DOCS = config_schema.REPO_ROOT / "docs"
PACKAGES_WITH_FILE_TABLES = ("engine", "model", "rl", "sandbox", "selfplay")
_TICKED = re.compile(r"`([^`]+)`")
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _text(name: str) -> str:
  return (DOCS / name).read_text()


def _tables(text: str) -> list[list[str]]:
  """The first cells of each markdown table's body rows, one list per table."""
  tables, rows = [], None
  for line in text.splitlines() + [""]:
    if line.startswith("|"):
      if rows is None:
        rows = []  # header row
      elif not set(line) <= set("|-: "):
        rows.append(line.split("|")[1].strip())
    elif rows is not None:
      tables.append(rows)
      rows = None
  return tables


def _section(text: str, heading: str) -> str:
  start = text.index(f"\n{heading}\n")
  end = text.find("\n## ", start + 1)
  return text[start:] if end < 0 else text[start:end]


def _sentence(text: str, marker: str) -> str:
  """The text from `marker` to the end of its sentence."""
  start = text.index(marker)
  return text[start:start + re.search(r"\.(\s|$)", text[start:]).start()]


@pytest.mark.parametrize("package", PACKAGES_WITH_FILE_TABLES)
def test_file_table_lists_every_file_of_the_package(package):
  (table, *_) = [t for t in _tables(_text(f"{package}.md"))
                 if any(cell.endswith(".py`") for cell in t)]
  listed = {name for cell in table for name in _TICKED.findall(cell)}
  files = {p.name for p in (PACKAGE_ROOT / package).glob("*.py")} - {"__init__.py"}
  assert (sorted(files - listed), sorted(listed - files)) == ([], []), (
      f"docs/{package}.md's file table against spade_jax/{package}/: (missing, not there)")


def test_selfplay_import_list_is_what_the_package_imports():
  sentence = _sentence(_text("selfplay.md"), "the package imports only")
  listed = {f"spade_jax.{m}" for m in _TICKED.findall(sentence) if not m.endswith(".py")}
  used = {name for path, names in imports_of("selfplay").items() if path != "selfplay/play.py"
          for name in names if name.startswith("spade_jax.")
          and not under(name, ("spade_jax.selfplay",))}
  unlisted = sorted(n for n in used if not under(n, listed))
  unused = sorted(m for m in listed if not any(under(n, (m,)) for n in used))
  assert (unlisted, unused) == ([], []), "docs/selfplay.md imports: (not listed, not imported)"


def _state_dict_keys() -> list[str]:
  """The keys of the dict `SelfPlayLoop.state_dict` returns, read from loop.py."""
  tree = ast.parse((PACKAGE_ROOT / "selfplay" / "loop.py").read_text())
  (method,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and n.name == "state_dict"]
  (returned,) = [n.value for n in ast.walk(method) if isinstance(n, ast.Return)]
  assert isinstance(returned, ast.Dict), "state_dict no longer returns a dict literal"
  return [k.value for k in returned.keys]


def test_selfplay_state_keys_are_the_loops():
  sentence = _sentence(_text("selfplay.md"), "`SelfPlayLoop.state_dict()` keys:")
  listed = _TICKED.findall(sentence)[1:]
  assert listed == _state_dict_keys()


def test_step_record_tables_are_the_dataclass_fields():
  tables = _tables(_section(_text("selfplay.md"), "## StepRecord"))
  documented = [[_TICKED.findall(cell)[0] for cell in t] for t in tables]
  assert documented == [[f.name for f in dataclasses.fields(cls)]
                        for cls in (StepRecord, EnvReport)]


def _workdir_children() -> set[str]:
  """The literal names the package joins onto a workdir: storage.join(workdir, "name", ...)."""
  found = set()
  for path in PACKAGE_ROOT.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "join" and len(node.args) >= 2
          and isinstance(node.args[0], ast.Name) and node.args[0].id == "workdir"
          and isinstance(node.args[1], ast.Constant)):
        found.add(node.args[1].value)
  return found


def test_launch_layout_names_every_file_the_run_writes():
  named = _TICKED.findall(_sentence(_text("launch.md"), "Layout:"))
  written = _workdir_children() | {MODEL_CONFIG_FILE, RUN_CONFIG_FILE, LOG_NAME}
  assert {"checkpoints", "tb", "log.txt", "eval"} <= written  # the scan still finds them
  missing = sorted(w for w in written if not any(re.search(rf"(^|/){re.escape(w)}(/|$)", n)
                                                    for n in named))
  assert missing == [], f"docs/launch.md's workdir layout leaves out {missing}"


def test_readme_games_summary_is_the_games_config():
  """The README's "**games** (...)" says what configs/games.py runs: a step draws its
  environments from some of the skill categories, not from all of them."""
  readme = (config_schema.REPO_ROOT / "README.md").read_text()
  summary = " ".join(re.search(r"\*\*games\*\* \(([^)]*)\)", readme).group(1).split())
  games = config_schema.config_of("games").selfplay
  assert summary == (f"{games.num_envs} environments a step from "
                     f"{_NUMBER_WORDS[games.categories_per_step]} of "
                     f"{_NUMBER_WORDS[len(GAME_CATEGORIES)]} cognitive-skill categories, "
                     f"k = {games.k}")


def _layout_groups() -> dict[str, list[str]]:
  """The README's Layout tree: each top-level entry (`spade_jax/`, `configs/`, ...) with its
  lines."""
  readme = (config_schema.REPO_ROOT / "README.md").read_text()
  block = re.search(r"\n## Layout\n+```\n(.*?)\n```", readme, re.S).group(1)
  groups: dict[str, list[str]] = {}
  for line in block.splitlines():
    if not line.startswith(" "):
      head = line.split()[0]
      groups[head] = []
    groups[head].append(line)
  return groups


def _tracked(folder: str = "") -> set[str]:
  """The names of the tracked files and folders directly under `folder` of the repository."""
  out = subprocess.run(["git", "ls-files", "--", folder or "."], cwd=config_schema.REPO_ROOT,
                       capture_output=True, text=True, check=True).stdout
  prefix = f"{folder}/" if folder else ""
  names = set()
  for path in out.splitlines():
    rest = path.removeprefix(prefix).split("/")
    names.add(rest[0] + ("/" if len(rest) > 1 else ""))
  return names


def test_readme_layout_is_the_tree():
  """Every folder of the repository is a top-level entry; every package and module of
  spade_jax/ leads a line of its entry; a folder whose entry names one of its files
  (`x.py`, `x.ipynb`) names them all."""
  groups = _layout_groups()
  folders = {n for n in _tracked() if n.endswith("/") and not n.startswith(".")}
  assert (sorted(folders - set(groups)), sorted(set(groups) - folders)) == ([], []), (
      "README Layout's top-level entries against the repository's folders: (missing, not there)")
  package = {n for n in _tracked("spade_jax") if n != "__init__.py"}
  led = {line.split()[0] for line in groups["spade_jax/"][1:]
         if line.split()[0].endswith(("/", ".py"))}
  assert (sorted(package - led), sorted(led - package)) == ([], []), (
      "README Layout's spade_jax/ entries against the package: (missing, not there)")
  for head, lines in groups.items():
    named = set(re.findall(r"\b\w+\.(?:py|ipynb)\b", " ".join(lines[1:] + [lines[0]])))
    files = {n for n in _tracked(head.rstrip("/")) if n.endswith((".py", ".ipynb"))
             and n != "__init__.py"}
    if head != "spade_jax/" and named & files:
      assert (sorted(files - named), sorted(named - files)) == ([], []), (
          f"README Layout's {head} entry against the folder's files: (missing, not there)")


def test_results_has_a_table_per_benchmark():
  """bench/RESULTS.md, the current figures: a section per bench/*.py, and every table gives
  the command, the machine, the date and the log entry of its figures."""
  results = (config_schema.REPO_ROOT / "bench" / "RESULTS.md").read_text()
  scripts = sorted(p.name for p in (config_schema.REPO_ROOT / "bench").glob("*.py"))
  missing = [s for s in scripts if f"\n## bench/{s}\n" not in results]
  assert not missing, f"bench/RESULTS.md has no section for {missing}"
  lines = results.splitlines()
  columns = [[c.strip() for c in line.split("|")[1:-1]]
             for line, below in zip(lines, lines[1:], strict=False)
             if line.startswith("|") and re.match(r"^\|\s*-", below)]
  assert columns, "bench/RESULTS.md has no table"
  bad = [c for c in columns if not {"command", "machine", "date", "log"} <= set(c)]
  assert not bad, f"tables without command / machine / date / log columns: {bad}"
  assert "(RESULTS_LOG.md" in results, "bench/RESULTS.md does not link its log"
