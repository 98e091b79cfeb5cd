"""The experiment schema: every config field with its default, config modules, validation.

`base_config()` holds every field the loop, engine, sandbox and trainer read, each with a
comment; `configs/*.py` start from it and set what their experiment changes. Defaults of the
parts with a typed settings struct come from that struct (`SelfPlayConfig`, `RLConfig`,
`ModelConfig`), so each default is written once. `validate` runs once at launch, before
anything is built or compiled: it builds those structs (which check themselves) and checks
the remaining sections, naming the field, its value and what was expected, so `k=0`, `G=1`, an
unknown preset or a missing checkpoint fail in the first seconds instead of after an hour of
compilation.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

from absl import flags
from ml_collections import ConfigDict, config_dict, config_flags

from spade_jax.eval.config import EvalConfig
from spade_jax.metrics.config import MetricsConfig
from spade_jax.model.config import PRESETS, ModelConfig
from spade_jax.model.sharding import MESH_AXES
from spade_jax.rl.config import RLConfig
from spade_jax.sandbox.isolation import LEVELS
from spade_jax.selfplay import corpus
from spade_jax.selfplay.config import SelfPlayConfig, sampling_config

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Fields of RLConfig that are derived from other sections, not set under config.rl.
DERIVED_RL_FIELDS = {"temperature": "sampling.agent.temperature"}


class ConfigError(ValueError):
  """A config value that cannot work; the message names the field."""


def base_config() -> ConfigDict:
  """Every field with a working default (a small CPU-sized run); experiments override."""
  sp, model = SelfPlayConfig, ModelConfig  # the typed settings hold the defaults
  c = ConfigDict()
  c.seed = sp.seed  # root of every random choice (categories, memory samples, resets, sampling)
  c.setting = sp.setting  # "games" or "tool_use": designer scaffold and agent action style
  c.model = ConfigDict()
  c.model.preset = "tiny"  # name in spade_jax.model.config.PRESETS
  c.model.checkpoint = ""  # HF dir / hub id / trainer checkpoint; "" = random init
  c.model.param_dtype = model.param_dtype  # storage dtype of the weights and optimiser moments
  c.model.compute_dtype = model.compute_dtype  # matmul dtype ("bfloat16" on TPU)
  # Per-layer rematerialisation in the training pass: "none", "dots" (keep matmul outputs),
  # "full" (recompute each layer) or "auto" (none on CPU, full on GPU / TPU; docs/model.md).
  c.model.remat = model.remat
  # Training attention kernel: "auto" (by platform), "blocked", "xla", "cudnn", "pallas_tpu".
  c.model.attention_impl = model.attention_impl
  # LoRA (spade_jax/model/lora.py): rank 0 = off (full weights train); alpha / rank scales the
  # update; targets are fnmatch patterns over q/k/v/o_proj and gate/up/down_proj.
  c.model.lora_rank = model.lora_rank
  c.model.lora_alpha = model.lora_alpha
  c.model.lora_targets = model.lora_targets
  c.tokenizer = "tiny"  # "tiny" (bundled SentencePiece) or a dir / hub id with tokenizer.json
  c.mesh = {"data": 1, "fsdp": -1, "tensor": 1, "expert": 1}  # -1 takes the remaining devices
  c.selfplay = ConfigDict()
  c.selfplay.num_envs = sp.num_envs  # environments played per step (the step's budget)
  c.selfplay.k = sp.k  # refresh interval of the environment set == designer update delay
  c.selfplay.group_size = sp.group_size  # G episodes per arm (no hint / hint) per environment
  c.selfplay.skills = sp.skills  # skill categories (the games seed library's six by default)
  c.selfplay.categories_per_step = sp.categories_per_step  # categories drawn for each refresh
  c.selfplay.max_turns = sp.max_turns  # framework cap on episode length (the env's may be less)
  c.selfplay.action_format = sp.action_format  # agent action wrapper; {} = the action
  c.selfplay.designer_reward = sp.designer_reward  # or "ema_learning_potential" (regret.py)
  # "discard" (the paper), "penalty" or "two_level": how invalid designs enter the designer's
  # advantage (selfplay/designer_advantage.py, docs/selfplay.md).
  c.selfplay.designer_advantage = sp.designer_advantage
  c.selfplay.designer_group_by_category = sp.designer_group_by_category  # group per category
  c.selfplay.invalid_designer_reward = sp.invalid_designer_reward  # "penalty": below any regret
  c.selfplay.validity_weight = sp.validity_weight  # "two_level": weight of the validity term
  c.selfplay.use_corpus = sp.use_corpus  # ground each designer prompt in a corpus passage
  c.selfplay.use_memory = sp.use_memory  # show the designer a sample of the environment memory
  c.selfplay.train_designer = sp.train_designer  # False = frozen designer (no designer gradient)
  c.selfplay.fixed_envs = sp.fixed_envs  # "grpo" / "rlve": fixed-env baselines on the seeds
  c.selfplay.fill_from_memory = sp.fill_from_memory  # top up a short valid set with replays
  c.selfplay.train_agent_on_hint_arm = sp.train_agent_on_hint_arm  # hint arm only measures
  c.selfplay.library = sp.library  # "seeds" or "vowels" (dense reward; smoke runs)
  c.selfplay.memory = ConfigDict()
  c.selfplay.memory.capacity = sp.memory_capacity  # environments kept (selfplay/memory.py)
  c.selfplay.memory.sample_size = sp.memory_sample_size  # memory entries per designer prompt
  c.sampling = ConfigDict()  # the trainer's temperature is the rollouts' (one for both roles)
  c.sampling.designer = sampling_config(sp.designer_sampling)
  c.sampling.agent = sampling_config(sp.agent_sampling)
  c.engine = ConfigDict()
  c.engine.num_slots = 64  # concurrent conversations (KV-cache rows)
  c.engine.max_cache_len = 8192  # tokens per conversation: prompt + every turn
  c.engine.prefill_buckets = (256, 1024, 4096)  # padded prefill lengths (one compile each)
  c.engine.decode_steps_per_poll = 16  # decode steps per poll() between host checks
  # Capacities the decode state is resized between (one compile of each call per pair); None:
  # the engine's defaults (docs/engine.md, "Capacity"). Fewer sizes, fewer compiles.
  c.engine.decode_widths = config_dict.placeholder(tuple)  # slot counts, e.g. (16, 64)
  c.engine.decode_lengths = config_dict.placeholder(tuple)  # entries a slot, e.g. (2048, 4096)
  c.sandbox = ConfigDict()
  c.sandbox.num_workers = 16  # sandboxed environment processes running at once
  c.sandbox.reset_timeout_s = 2.0  # wall clock for loading a source and reset()
  c.sandbox.step_timeout_s = 1.0  # wall clock for one step()
  c.sandbox.memory_mb = 1024  # address-space cap of an environment process
  c.sandbox.isolation = "strict"  # "strict" | "basic" | "none": see spade_jax/sandbox/isolation.py
  c.sandbox.require_oracle = False  # validator: designed envs must define oracle_actions()
  # Every trainer setting, with RLConfig's defaults and comments (spade_jax/rl/config.py).
  c.rl = ConfigDict(rl_defaults())
  c.corpus = ConfigDict()
  c.corpus.paths = ()  # files / globs (text, JSONL, Parquet); () = built-in science corpus
  c.corpus.format = "auto"  # "auto" (by suffix), "text", "jsonl" or "parquet"
  c.corpus.text_field = "text"  # JSONL key / Parquet column holding the document
  c.corpus.max_chars = corpus.DEFAULT_MAX_CHARS  # passages are cut to this many characters
  c.corpus.seed = 0  # shuffle seed (reshuffled every epoch)
  c.metrics = ConfigDict()
  # A local sentence-transformers model directory for a second Vendi/n ("" = off).
  c.metrics.embedding_model = MetricsConfig.embedding_model
  c.train = ConfigDict()
  c.train.num_steps = 400  # training steps (rollouts); the paper runs 400
  c.train.checkpoint_every = 16  # steps between checkpoints (the last step always saves)
  c.train.keep_checkpoints = 3  # newest checkpoints kept
  c.train.log_every = 1  # steps between TensorBoard writes
  c.train.num_text_summaries = 3  # environments shown as text each step
  # Persistent XLA compilation cache ("" = off): a resumed run skips recompiling the engine's
  # and the trainer's shapes. A relative path is under the workdir (gs:// too); an absolute,
  # ~ or gs:// path is shared by every run that names it.
  c.train.compilation_cache_dir = "xla_cache"
  ev = EvalConfig  # held-out evaluation during training (spade_jax/eval/config.py)
  c.eval = ConfigDict()
  c.eval.suites = ev.suites  # suite names (python -m spade_jax.eval); () = no evaluation
  c.eval.every = ev.every  # steps between evaluations; 0 = never
  c.eval.limit = ev.limit  # first items of each suite
  c.eval.samples = ev.samples  # responses per item
  c.eval.max_new_tokens = ev.max_new_tokens  # reply cap of the evaluation's sampling
  c.eval.hold_out_seed_games = ev.hold_out_seed_games  # keep HELDOUT_GAMES out of training
  return c


def rl_defaults() -> dict[str, Any]:
  """RLConfig's fields and defaults, less those derived from other sections."""
  return {f.name: f.default for f in dataclasses.fields(RLConfig)
          if f.name not in DERIVED_RL_FIELDS}


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


def parse_config_args(argv: Sequence[str], fv: flags.FlagValues) -> tuple[ConfigDict, str]:
  """Parses argv (program name first) into `fv` with a required, locked `--config`.

  `--config X` may name a module of configs/ (see `resolve_config_path`); other flags are
  the ones the caller defined on `fv`. Returns (config, its file); an override naming a
  field the config lacks raises ConfigError. `-h` / `--help` prints the flags and exits.
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
  config = config_flags.DEFINE_config_file("config", None, "configs/<name>.py", flag_values=fv,
                                           lock_config=True, sys_argv=argv)
  if any(a in ("-h", "--help", "-help") for a in argv[1:]):  # absl.app's --help, without app
    print(f"usage: {argv[0]} --config NAME [--config.FIELD=VALUE ...] [flags]\n\n"
          f"{fv.get_help().strip()}")
    raise SystemExit(0)
  flags.mark_flag_as_required("config", flag_values=fv)
  try:
    fv(argv)
  except (AttributeError, KeyError) as err:  # an override naming a field the config lacks
    overrides = [a for a in argv if a.startswith(("--config.", "-config."))]
    raise ConfigError(f"unknown config field {err} in overrides {overrides}") from None
  return config.value, fv["config"].config_filename


def config_name(arg: str) -> str:
  """The config module's name, e.g. 'games' for 'configs/games.py:x'."""
  return pathlib.Path(arg.partition(":")[0]).stem


def _require(ok: bool, field: str, value: Any, expected: str) -> None:
  if not ok:
    raise ConfigError(f"config.{field}={value!r}: expected {expected}")


def _is_number(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_path_or_hub(field: str, value: str) -> None:
  """An existing local path, or a hub id 'org/name' (resolved by the loader)."""
  expanded = os.path.expanduser(value)
  if os.path.exists(expanded) or value.startswith("gs://"):
    return
  if value.startswith(("/", ".", "~")) or not _HUB_ID.match(value):
    raise ConfigError(f"config.{field}={value!r}: no such file or directory (expected a local "
                      "checkpoint / tokenizer path or a hub id 'org/name')")


def _check_model(config: ConfigDict) -> None:
  m = config.model
  _require(m.preset in PRESETS, "model.preset", m.preset, f"one of {sorted(PRESETS)}")
  try:  # the model's own struct checks dtypes, the remat policy and the attention kernel
    PRESETS[m.preset].replace(param_dtype=m.param_dtype, compute_dtype=m.compute_dtype,
                              remat=m.remat, attention_impl=m.attention_impl,
                              lora_rank=m.lora_rank, lora_alpha=m.lora_alpha,
                              lora_targets=tuple(m.lora_targets))
  except (ValueError, TypeError) as err:
    raise ConfigError(f"config.model: {err}") from None
  if m.checkpoint:
    _check_path_or_hub("model.checkpoint", m.checkpoint)
  _require(isinstance(config.tokenizer, str) and config.tokenizer != "", "tokenizer",
           config.tokenizer, "'tiny' or a tokenizer dir / hub id")
  if config.tokenizer != "tiny":
    _check_path_or_hub("tokenizer", config.tokenizer)


def _check_mesh(mesh: Any) -> None:
  sizes = dict(mesh)
  _require(set(sizes) <= set(MESH_AXES), "mesh", sizes, f"axes among {MESH_AXES}")
  _require(all(isinstance(v, int) and (v >= 1 or v == -1) for v in sizes.values())
           and list(sizes.values()).count(-1) <= 1, "mesh", sizes,
           "sizes >= 1 with at most one -1 (the remaining devices)")


def _check_rest(config: ConfigDict) -> None:
  e, sb, tr, co = config.engine, config.sandbox, config.train, config.corpus
  for name in ("num_slots", "max_cache_len", "decode_steps_per_poll"):
    _require(isinstance(e[name], int) and e[name] >= 1, f"engine.{name}", e[name], "an int >= 1")
  for name in ("decode_widths", "decode_lengths"):
    sizes = e[name]
    _require(sizes is None or (all(isinstance(b, int) and b >= 1 for b in sizes)
                               and list(sizes) == sorted(set(sizes))),
             f"engine.{name}", sizes, "None or increasing ints >= 1")
  buckets = tuple(e.prefill_buckets)
  _require(len(buckets) >= 1 and list(buckets) == sorted(set(buckets)) and buckets[0] >= 1
           and buckets[-1] <= e.max_cache_len, "engine.prefill_buckets", e.prefill_buckets,
           f"increasing positive lengths <= engine.max_cache_len={e.max_cache_len}")
  for name in ("reset_timeout_s", "step_timeout_s", "memory_mb", "num_workers"):
    _require(_is_number(sb[name]) and sb[name] > 0, f"sandbox.{name}", sb[name], "> 0")
  _require(sb.isolation in LEVELS, "sandbox.isolation", sb.isolation, f"one of {LEVELS}")
  _require(isinstance(sb.require_oracle, bool), "sandbox.require_oracle", sb.require_oracle,
           "a bool")
  for name in ("num_steps", "checkpoint_every", "keep_checkpoints", "log_every"):
    _require(isinstance(tr[name], int) and tr[name] >= 1, f"train.{name}", tr[name],
             "an int >= 1")
  _require(isinstance(tr.num_text_summaries, int) and tr.num_text_summaries >= 0,
           "train.num_text_summaries", tr.num_text_summaries, "an int >= 0")
  _require(co.format in corpus.FORMATS, "corpus.format", co.format, f"one of {corpus.FORMATS}")
  _require(isinstance(co.max_chars, int) and co.max_chars >= 1, "corpus.max_chars",
           co.max_chars, "an int >= 1")
  paths = (co.paths,) if isinstance(co.paths, str) else tuple(co.paths)
  if any(paths) and config.selfplay.use_corpus:
    try:
      corpus.expand_paths(paths)
    except FileNotFoundError as err:
      raise ConfigError(str(err)) from None


def validate(config: ConfigDict) -> None:
  """Raises ConfigError naming the first bad field; returns None for a usable config."""
  try:
    SelfPlayConfig.from_config(config)  # seed, setting, selfplay, sampling
    RLConfig.from_config(config.rl)
    EvalConfig.from_config(config)
    MetricsConfig.from_config(config)  # metrics.embedding_model names a directory
  except ValueError as err:
    raise ConfigError(str(err)) from None
  _check_model(config)
  _check_mesh(config.mesh)
  _check_rest(config)
