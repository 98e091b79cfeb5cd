"""The experiment schema: every config field with its default, config modules, validation.

`base_config()` holds every field the loop, engine, sandbox and trainer read; `configs/*.py`
start from it and set what their experiment changes. Each section is generated from its
frozen struct, which holds the defaults and the comment on each field
(`spade_jax.experiment.SECTIONS`; `SelfPlayConfig` for seed, setting, selfplay and sampling,
through `selfplay.config.config_defaults`), so each setting is written once. `validate` runs
once at launch, before anything is built or compiled: it builds the typed `Experiment` (each
struct checks itself) and checks the files the config names, naming the field, its value and
what was expected, so `k=0`, `G=1`, an unknown preset or a missing checkpoint fail in the
first seconds instead of after an hour of compilation.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import re
import typing
from collections.abc import Sequence
from typing import Any

from absl import flags
from ml_collections import ConfigDict, config_dict, config_flags

from spade_jax.checks import ConfigError, section_defaults
from spade_jax.experiment import DEFAULT_MESH, SECTIONS, Experiment
from spade_jax.selfplay import corpus
from spade_jax.selfplay.config import config_defaults

__all__ = ["CONFIG_DIR", "REPO_ROOT", "ConfigError", "base_config", "config_name",
           "parse_config_args", "resolve_config_path", "validate"]

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_EXPERIMENT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Experiment)}


def _section(cls: type) -> ConfigDict:
  """config.<section> with the struct's defaults; a None default (an `X | None` field) is a
  placeholder that takes an X later."""
  hints = typing.get_type_hints(cls)
  return ConfigDict({name: config_dict.placeholder(_optional_type(hints[name]))
                     if value is None else value
                     for name, value in section_defaults(cls).items()})


def _optional_type(hint: Any) -> type:
  """X of `X | None` (tuple for `tuple[int, ...] | None`)."""
  (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
  return typing.get_origin(inner) or inner


def base_config() -> ConfigDict:
  """Every field with its default (the structs' defaults); experiments override."""
  c = ConfigDict(config_defaults())  # seed, setting, selfplay and sampling: SelfPlayConfig
  c.tokenizer = _EXPERIMENT_DEFAULTS["tokenizer"]  # "tiny" or a dir / hub id (tokenizer.json)
  c.mesh = dict(DEFAULT_MESH)  # -1 takes the remaining devices
  # The other sections hold their struct's fields, defaults and comments:
  #   model     spade_jax/model/policy_config.py   PolicyConfig
  #   engine    spade_jax/engine/config.py         EngineConfig
  #   sandbox   spade_jax/sandbox/config.py        SandboxConfig
  #   rl        spade_jax/rl/config.py             RLConfig (less the derived temperatures, bounds)
  #   corpus    spade_jax/selfplay/corpus.py       CorpusConfig
  #   metrics   spade_jax/metrics/config.py        MetricsConfig
  #   train     spade_jax/experiment.py            TrainConfig
  #   eval      spade_jax/eval/config.py           EvalConfig
  for name, cls in SECTIONS.items():
    c[name] = _section(cls)
  return c


def resolve_config_path(arg: str) -> str:
  """'games.py', 'games', 'configs/games.py' or any path (with an optional ':arg') -> path."""
  path, sep, rest = arg.partition(":")
  candidates = [path, CONFIG_DIR / path, CONFIG_DIR / f"{path}.py"]
  for candidate in candidates:
    if os.path.isfile(candidate):
      return f"{candidate}{sep}{rest}"
  names = sorted(p.stem for p in CONFIG_DIR.glob("*.py"))
  raise ConfigError(f"--config={arg!r}: no such file (also tried {CONFIG_DIR}/); "
                    f"available configs: {names}")


def config_of(name: str) -> ConfigDict:
  """`get_config()` of a shipped config module ('games.py' or 'games'), unlocked: for a config
  derived from another (configs/games_8b.py, games_lora.py)."""
  path = resolve_config_path(name)
  spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem + "_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def parse_config_args(argv: Sequence[str], fv: flags.FlagValues,
                      prog: str | None = None) -> tuple[ConfigDict, str]:
  """Parses argv (program name first) into `fv` with a required, locked `--config`.

  `--config X` may name a module of configs/ (see `resolve_config_path`); other flags are
  the ones the caller defined on `fv`. Returns (config, its file); an override naming a
  field the config lacks raises ConfigError. `-h` / `--help` prints the usage line (`prog`,
  the command as users type it, else argv[0]) and the flags, and exits.
  """
  argv, i = list(argv), 0
  while i < len(argv):
    if argv[i] in ("--config", "-config") and i + 1 < len(argv):
      argv[i + 1] = resolve_config_path(argv[i + 1])
      i += 1
    elif argv[i].startswith(("--config=", "-config=")):
      flag, value = argv[i].split("=", 1)
      argv[i] = f"{flag}={resolve_config_path(value)}"
    i += 1
  config = config_flags.DEFINE_config_file(
      "config", None, "a module of configs/ by name (smoke, games, ...) or a path",
      flag_values=fv, lock_config=True, sys_argv=argv)
  if any(a in ("-h", "--help", "-help") for a in argv[1:]):  # absl.app's --help, without app
    print(f"usage: {prog or argv[0]} --config NAME [--config.FIELD=VALUE ...] [flags]\n\n"
          f"{_flags_help(fv)}")
    raise SystemExit(0)
  flags.mark_flag_as_required("config", flag_values=fv)
  try:
    fv(argv)
  except (AttributeError, KeyError) as err:  # an override naming a field the config lacks
    raise ConfigError(_unknown_field_message(err, argv)) from None
  return config.value, fv["config"].config_filename


def _flags_help(fv: flags.FlagValues) -> str:
  """Each flag of `fv`, by name, with its help and default (absl's own help groups the flags
  under module paths and adds its --flagfile and --undefok)."""
  by_name = {fv[name].name: fv[name] for name in fv}
  lines = []
  for name, flag in sorted(by_name.items()):
    syntax = f"--[no]{name}" if flag.boolean else f"--{name}"
    default = "" if flag.default in (None, "") else f" (default: {_shown(flag.default)})"
    lines.append(flags.text_wrap(f"{syntax}: {flag.help}{default}", indent="      ",
                                 firstline_indent="  "))
  return "\n".join(lines)


def _shown(value: object) -> str:
  """A default as it is typed on the command line (booleans in lower case)."""
  return str(value).lower() if isinstance(value, bool) else str(value)


def _unknown_field_message(err: Exception, argv: Sequence[str]) -> str:
  """Names the overridden field the config lacks. ml_collections' error carries only the
  missing key, quoted ("'kk'"), so the field is the override whose path holds that key."""
  key = str(err.args[0] if err.args else err).strip("'\"")
  overrides = [a for a in argv[1:] if a.startswith(("--config.", "-config."))]
  paths = [a.lstrip("-").split("=", 1)[0].removeprefix("config.") for a in overrides]
  named = [p for p in paths if key in p.split(".")]
  return f"unknown config field {named[0] if named else key} (overrides: {' '.join(overrides)})"


def config_name(arg: str) -> str:
  """The config module's name, e.g. 'games' for 'configs/games.py:x'."""
  return pathlib.Path(arg.partition(":")[0]).stem


def _check_path_or_hub(field: str, value: str) -> None:
  """An existing local path, or a hub id 'org/name' (resolved by the loader)."""
  expanded = os.path.expanduser(value)
  if os.path.exists(expanded) or value.startswith("gs://"):
    return
  if value.startswith(("/", ".", "~")) or not _HUB_ID.match(value):
    raise ConfigError(f"config.{field}={value!r}: no such file or directory (expected a local "
                      "checkpoint / tokenizer path or a hub id 'org/name')")


def _check_files(experiment: Experiment) -> None:
  """The checkpoint, tokenizer and corpus files the config names exist."""
  if experiment.model.checkpoint:
    _check_path_or_hub("model.checkpoint", experiment.model.checkpoint)
  if experiment.tokenizer != "tiny":
    _check_path_or_hub("tokenizer", experiment.tokenizer)
  if any(experiment.corpus.paths) and experiment.selfplay.use_corpus:
    try:
      corpus.expand_paths(experiment.corpus.paths)
    except FileNotFoundError as err:
      raise ConfigError(str(err)) from None


def validate(config: Any, *, files: bool = True) -> Experiment:
  """The typed, checked experiment of `config`; raises ConfigError naming the first bad field.

  `files=False` skips the checks that the named checkpoint, tokenizer and corpus files
  exist (`spade_jax.plan` plans a config for another machine).
  """
  try:
    experiment = Experiment.from_config(config)
  except ConfigError:
    raise
  except (ValueError, TypeError) as err:  # a struct's own check that is not a ConfigError
    raise ConfigError(str(err)) from None
  if files:
    _check_files(experiment)
  return experiment
