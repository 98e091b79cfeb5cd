"""The package's metadata: `pip install -e .` builds it without warnings, it carries its
license, and it declares every third-party module the package and the launcher import (so
`pip install .` alone runs them).

setuptools builds the editable wheel as pip has it do; the imports are read with `ast` from
spade_jax/ and launch/, and each module is mapped to the installed distributions that
provide it.
"""

import ast
import functools
import json
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from importlib import metadata

import pytest

from spade_jax.selfplay.science_corpus import PACKAGES as CORPUS_PACKAGES

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("spade_jax", "launch")
FIRST_PARTY = {"spade_jax"}
# Installed with --no-deps (their declared dependencies conflict), so no extra can name them.
NO_DEPS_REQUIREMENTS = REPO_ROOT / "requirements-nodeps.txt"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def _canonical(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> set[str]:
  """The absolute imports of every file under SOURCE_DIRS, cut to two dotted parts
  (`google.auth` is told apart from the rest of the `google` namespace by its second)."""
  found = set()
  for folder in SOURCE_DIRS:
    for path in (REPO_ROOT / folder).rglob("*.py"):
      for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
          found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
          found.add(node.module)
  return {".".join(name.split(".")[:2]) for name in found}


def _third_party(modules: set[str]) -> set[str]:
  return {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names | FIRST_PARTY}


def _provides(distribution: str, module: str) -> bool:
  """Whether `distribution`'s files hold `module` (a package folder or a module file)."""
  path = module.replace(".", "/")
  return any(str(f).startswith(f"{path}/") or str(f) == f"{path}.py"
             for f in metadata.distribution(distribution).files or ())


@functools.cache
def _top_level_owners() -> dict[str, list[str]]:
  return metadata.packages_distributions()


def providers(module: str) -> set[str]:
  """The canonical names of the installed distributions that provide `module`; a top-level
  name several share (a namespace such as `google`) is narrowed by the module's path."""
  owners = _top_level_owners().get(module.split(".")[0], [])
  if len(owners) > 1 and "." in module:
    owners = [d for d in owners if _provides(d, module)]
  return {_canonical(d) for d in owners}


def _requirement_names(lines: list[str]) -> set[str]:
  return {_canonical(_NAME.match(line).group()) for line in lines if _NAME.match(line)}


# Builds the editable wheel as `pip install -e .` has the backend do, recording the Python
# warnings raised meanwhile (pip prints them); prints the wheel's name and the warnings last.
_BUILD = """
import json, sys, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as caught:
  warnings.simplefilter("always")
  wheel = build_meta.build_editable(sys.argv[1])
print(json.dumps([wheel, [f"{w.category.__name__}: {w.message}" for w in caught]]))
"""


@pytest.fixture(scope="module")
def editable_build(tmp_path_factory) -> tuple[Message, list[str]]:
  """(the METADATA, the warnings) of `pip install -e .`'s build, made from a copy of the
  project files and a link to the package, so that nothing is written into the checkout."""
  source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
  for name in ("pyproject.toml", "README.md", "LICENSE"):
    shutil.copy(REPO_ROOT / name, source / name)
  (source / "spade_jax").symlink_to(REPO_ROOT / "spade_jax")
  build = subprocess.run([sys.executable, "-c", _BUILD, str(out)], cwd=source,
                         capture_output=True, text=True, timeout=120)
  assert build.returncode == 0, build.stderr[-3000:]
  wheel, warnings = json.loads(build.stdout.splitlines()[-1])
  with zipfile.ZipFile(out / wheel) as archive:
    (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(archive.read(name).decode()), warnings


def test_pip_install_e_warns_of_nothing(editable_build):
  _, warnings = editable_build
  assert warnings == []


def test_the_license_is_an_spdx_expression_with_its_file(editable_build):
  message, _ = editable_build
  assert message["License-Expression"] == "Apache-2.0"
  assert message.get_all("License-File") == ["LICENSE"]
  assert "Apache License" in (REPO_ROOT / "LICENSE").read_text()


def test_every_imported_third_party_module_is_a_declared_dependency(editable_build):
  message, _ = editable_build
  declared = (_requirement_names(message.get_all("Requires-Dist") or [])
              | _requirement_names(NO_DEPS_REQUIREMENTS.read_text().splitlines()))
  modules = _third_party(_imported_modules()) | set(CORPUS_PACKAGES)
  undeclared = {m: sorted(providers(m)) for m in sorted(modules)
                if not providers(m) & declared}
  assert undeclared == {}, "imported (module: installed distributions) but not declared"


def test_the_scan_sees_lazy_and_namespaced_imports_and_names_their_distributions():
  assert {"google.auth", "pyarrow.parquet"} <= _third_party(_imported_modules())
  assert providers("google.auth") == {"google-auth"}
  assert providers("yaml") == {"pyyaml"}
