"""Experiment configs: the schema with defaults, locating config modules, and validation.

`base_config()` holds every field the loop, engine, sandbox and trainer read, each with a
comment; `configs/*.py` start from it and set what their experiment changes. `validate`
runs once at launch, before anything is built or compiled, and names the field, its value
and what was expected, so `k=0`, `G=1`, an unknown preset or a missing checkpoint fail in
the first second instead of after an hour of compilation.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
from typing import Any

from ml_collections import ConfigDict, config_dict

from spade_jax.envs.library import GAME_CATEGORIES, TOOL_CATEGORIES

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"
SETTINGS = ("games", "tool_use")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ConfigError(ValueError):
  """A config value that cannot work; the message names the field."""


def base_config() -> ConfigDict:
  """Every field with a working default (a small CPU-sized run); experiments override."""
  c = ConfigDict()
  c.seed = 0  # root of every random choice (categories, memory samples, resets, sampling)
  c.setting = "games"  # "games" or "tool_use": designer scaffold and agent action style
  c.model = ConfigDict()
  c.model.preset = "tiny"  # name in spade_jax.model.config.PRESETS
  c.model.checkpoint = ""  # HF dir / hub id / trainer checkpoint; "" = random init
  c.model.param_dtype = "float32"  # storage dtype of the weights and optimiser moments
  c.model.compute_dtype = "float32"  # matmul dtype ("bfloat16" on TPU)
  c.tokenizer = "tiny"  # "tiny" (bundled SentencePiece) or a dir / hub id with tokenizer.json
  c.mesh = {"data": 1, "fsdp": -1, "tensor": 1, "expert": 1}  # -1 takes the remaining devices
  c.selfplay = ConfigDict()
  c.selfplay.num_envs = 24  # environments played per step (the step's budget)
  c.selfplay.k = 4  # refresh interval of the environment set == designer update delay
  c.selfplay.group_size = 8  # G episodes per arm (no hint / hint) per environment
  c.selfplay.skills = GAME_CATEGORIES  # the six skill categories of the games seed library
  c.selfplay.categories_per_step = 3  # categories drawn for each refresh
  c.selfplay.max_turns = 8  # framework cap on episode length (the env's own may be smaller)
  c.selfplay.action_format = "<action>{}</action>"  # agent action wrapper; {} = the action
  c.selfplay.designer_reward = "hint_regret"  # or "ema_learning_potential" (selfplay/regret.py)
  c.selfplay.invalid_designer_reward = -1.0  # below any regret (>= -1): invalid is worst
  c.selfplay.use_corpus = True  # ground each designer prompt in a corpus passage
  c.selfplay.use_memory = True  # show the designer a sample of the environment memory
  c.selfplay.train_designer = True  # False = frozen designer (no designer gradient)
  c.selfplay.fixed_envs = False  # fixed-environment GRPO on the seed library, no designer
  c.selfplay.fill_from_memory = False  # top up a short valid set with memory replays
  c.selfplay.train_agent_on_hint_arm = False  # hinted episodes only measure regret
  c.selfplay.memory = ConfigDict()
  c.selfplay.memory.capacity = 512  # environments kept; eviction rule in selfplay/memory.py
  c.selfplay.memory.sample_size = 4  # memory entries shown in each designer prompt
  c.sampling = ConfigDict()
  c.sampling.designer = {"max_new_tokens": 2048, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.sampling.agent = {"max_new_tokens": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
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
  c.sandbox.isolation = "strict"  # "strict" | "basic" | "none": see spade_jax/sandbox/probe.py
  c.rl = ConfigDict()
  c.rl.learning_rate = 1e-6  # AdamW peak learning rate
  c.rl.warmup_steps = 0  # linear warmup steps
  c.rl.schedule = "constant"  # "constant" or "cosine" (to 0 at total_steps)
  c.rl.total_steps = 400  # decay horizon of the cosine schedule
  c.rl.weight_decay = 0.0  # AdamW decoupled weight decay
  c.rl.grad_clip_norm = 1.0  # global-norm clip; 0 disables
  c.rl.adam_b1 = 0.9  # AdamW first-moment decay
  c.rl.adam_b2 = 0.999  # AdamW second-moment decay
  c.rl.adam_eps = 1e-8  # AdamW denominator epsilon
  c.rl.beta = 0.0  # KL coefficient to the initial policy; 0 = no reference model
  c.rl.kl_estimator = "k3"  # "k1" or "k3"
  c.rl.clip_low = 0.2  # importance ratio lower bound 1 - clip_low
  c.rl.clip_high = 0.28  # upper bound 1 + clip_high (clip-higher)
  c.rl.loss_agg = "token_mean"  # "token_mean" or "seq_mean_token_mean"
  c.rl.adv_estimator = "grpo"  # advantage estimator (registry in spade_jax/rl/advantages.py)
  c.rl.adv_std_bessel = False  # unbiased std in the group normalisation
  c.rl.adv_eps = 1e-6  # added to the group std
  c.rl.micro_batch_size = 0  # rows per gradient-accumulation micro-batch; 0 = whole batch
  c.rl.agent_weight = 1.0  # scale of the agent's advantages
  c.rl.designer_weight = 1.0  # scale of the designer's advantages
  c.rl.temperature = 1.0  # sampling temperature of the rollouts (must match c.sampling)
  c.rl.logprob_chunk = 64  # positions per vocabulary-projection chunk (bounds [rows, chunk, V])
  c.rl.logprob_positions = "loss"  # "loss": logits only at loss tokens (<= 8 shapes per length)
  c.rl.logprob_remat = False  # recompute chunk logits in the backward: less memory, +1 matmul
  c.corpus = ConfigDict()
  c.corpus.paths = ()  # files / globs (text, JSONL, Parquet); () = built-in docstring corpus
  c.corpus.format = "auto"  # "auto" (by suffix), "text", "jsonl" or "parquet"
  c.corpus.text_field = "text"  # JSONL key / Parquet column holding the document
  c.corpus.max_chars = 2000  # passages are cut to this many characters
  c.corpus.seed = 0  # shuffle seed (reshuffled every epoch)
  c.train = ConfigDict()
  c.train.num_steps = 400  # training steps (rollouts); the paper runs 400
  c.train.checkpoint_every = 16  # steps between checkpoints (the last step always saves)
  c.train.keep_checkpoints = 3  # newest checkpoints kept
  c.train.log_every = 1  # steps between TensorBoard writes
  c.train.num_text_summaries = 3  # environments shown as text each step
  # Persistent XLA compilation cache shared by runs and resumes ("" = off): a resumed run
  # skips recompiling the engine's and the trainer's shapes.
  c.train.compilation_cache_dir = "~/.cache/spade_jax/xla"
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


def _check_sampling(role: str, s: ConfigDict, rl_temperature: float) -> None:
  f = f"sampling.{role}"
  _require(isinstance(s.max_new_tokens, int) and s.max_new_tokens > 0,
           f"{f}.max_new_tokens", s.max_new_tokens, "an int > 0")
  _require(_is_number(s.temperature) and s.temperature > 0, f"{f}.temperature", s.temperature,
           "> 0 (GRPO needs sampled log-probs, so no greedy rollouts)")
  _require(s.temperature == rl_temperature, f"{f}.temperature", s.temperature,
           f"equal to config.rl.temperature={rl_temperature} (the trainer rescales logits by it)")
  _require(_is_number(s.top_p) and 0 < s.top_p <= 1, f"{f}.top_p", s.top_p, "in (0, 1]")
  _require(isinstance(s.top_k, int) and s.top_k >= 0, f"{f}.top_k", s.top_k, "an int >= 0")


def _check_selfplay(sp: ConfigDict, setting: str) -> None:
  positive_ints = {"num_envs": sp.num_envs, "k": sp.k, "max_turns": sp.max_turns,
                   "categories_per_step": sp.categories_per_step,
                   "memory.capacity": sp.memory.capacity}
  for name, value in positive_ints.items():
    _require(isinstance(value, int) and value >= 1, f"selfplay.{name}", value, "an int >= 1")
  _require(isinstance(sp.group_size, int) and sp.group_size >= 2, "selfplay.group_size",
           sp.group_size, "an int >= 2 (group-relative advantages need two episodes per arm)")
  _require(isinstance(sp.memory.sample_size, int) and sp.memory.sample_size >= 0,
           "selfplay.memory.sample_size", sp.memory.sample_size, "an int >= 0")
  skills = tuple(sp.skills)
  _require(len(skills) >= 1 and len(set(skills)) == len(skills)
           and all(isinstance(s, str) and s for s in skills), "selfplay.skills", sp.skills,
           "a non-empty tuple of distinct category names")
  known = GAME_CATEGORIES if setting == "games" else TOOL_CATEGORIES
  _require(set(skills) <= set(known), "selfplay.skills", sp.skills,
           f"categories of the {setting} setting, among {known}")
  _require(sp.categories_per_step <= len(skills), "selfplay.categories_per_step",
           sp.categories_per_step, f"<= len(selfplay.skills)={len(skills)}")
  _require(isinstance(sp.action_format, str) and sp.action_format.count("{}") == 1,
           "selfplay.action_format", sp.action_format, "a string with exactly one '{}'")
  from spade_jax.selfplay.regret import DESIGNER_REWARDS  # pylint: disable=import-outside-toplevel
  _require(sp.designer_reward in DESIGNER_REWARDS, "selfplay.designer_reward",
           sp.designer_reward, f"one of {sorted(DESIGNER_REWARDS)}")
  _require(_is_number(sp.invalid_designer_reward), "selfplay.invalid_designer_reward",
           sp.invalid_designer_reward, "a finite number")


def _check_model(config: ConfigDict) -> None:
  from spade_jax.model.config import PRESETS  # pylint: disable=import-outside-toplevel
  _require(config.model.preset in PRESETS, "model.preset", config.model.preset,
           f"one of {sorted(PRESETS)}")
  if config.model.checkpoint:
    _check_path_or_hub("model.checkpoint", config.model.checkpoint)
  for name in ("param_dtype", "compute_dtype"):
    value = config.model[name]
    _require(value in ("float32", "bfloat16", "float16"), f"model.{name}", value,
             "'float32', 'bfloat16' or 'float16'")
  _require(isinstance(config.tokenizer, str) and config.tokenizer != "", "tokenizer",
           config.tokenizer, "'tiny' or a tokenizer dir / hub id")
  if config.tokenizer != "tiny":
    _check_path_or_hub("tokenizer", config.tokenizer)


def _check_mesh(mesh: Any) -> None:
  from spade_jax.model.sharding import MESH_AXES  # pylint: disable=import-outside-toplevel
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
  from spade_jax.sandbox.probe import LEVELS  # pylint: disable=import-outside-toplevel
  _require(sb.isolation in LEVELS, "sandbox.isolation", sb.isolation, f"one of {LEVELS}")
  for name in ("num_steps", "checkpoint_every", "keep_checkpoints", "log_every"):
    _require(isinstance(tr[name], int) and tr[name] >= 1, f"train.{name}", tr[name],
             "an int >= 1")
  _require(isinstance(tr.num_text_summaries, int) and tr.num_text_summaries >= 0,
           "train.num_text_summaries", tr.num_text_summaries, "an int >= 0")
  from spade_jax.selfplay import corpus  # pylint: disable=import-outside-toplevel
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
  from spade_jax.rl.config import RLConfig  # pylint: disable=import-outside-toplevel
  _require(config.setting in SETTINGS, "setting", config.setting, f"one of {SETTINGS}")
  _require(isinstance(config.seed, int), "seed", config.seed, "an int")
  _check_model(config)
  _check_mesh(config.mesh)
  _check_selfplay(config.selfplay, config.setting)
  try:
    RLConfig.from_config(config.rl)
  except ValueError as err:
    raise ConfigError(str(err)) from None
  for role in ("designer", "agent"):
    _check_sampling(role, config.sampling[role], config.rl.temperature)
  _check_rest(config)

