"""`check`: the starter's gates, measured through the loop's own designer and agent paths.

Designer: `selfplay.designer.generate_designs` (the real SlotConversationEngine and sandbox
pool, the loop's prompts and sampling from the config) on passages the starter was not
trained on (`sft_data.heldout_passages`, or a JSONL file's `text` fields), memory samples
from the loop's library (`seed_envs.seed_entries`, train split) in rotation, categories in turn.
Reported: the valid share, the share of valid designs that are not copies of a training
environment (`variants.normalise_source` of the build's environment sets, the seed games and
the loop's library) and Vendi/n of the valid sources.
Agent: the seed_games_heldout suite (spade_jax.eval) with the starter at the loop's agent
sampling (reply cap and temperature), and with a random model of the same shape (random
replies) as the baseline; mean return with and without hint.
Gates: valid >= 25 %; non-copies >= half of valid; agent mean return above random; hinted
return above unhinted. Also reported, not a gate: the repeat test (copy_test), whether the
model can copy from its context at all, which the agent needs to write an action word.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from flax import nnx

from proj.starter import sft_data, variants
from proj.starter.build import ENV_FILES, load_experiment
from proj.starter.copy_test import repeat_test
from spade_jax import run
from spade_jax.engine.api import SamplingParams
from spade_jax.envs.library import load_seed_library
from spade_jax.eval.evaluate import SuiteRequest, evaluate
from spade_jax.eval.generate import Generator
from spade_jax.eval.suites.user_data import read_jsonl
from spade_jax.metrics.vendi import vendi_per_n
from spade_jax.model import from_pretrained
from spade_jax.model.testing import random_model
from spade_jax.selfplay import designer
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.seed_envs import seed_entries
from spade_jax.selfplay.timing import Timings
from spade_jax.tokenizer import load_tokenizer

MIN_VALID_SHARE = 0.25
MIN_NOVEL_SHARE = 0.5


def read_passages(path: str | pathlib.Path) -> list[str]:
  """The `text` field of each JSON line; a bad line is named with its file and number."""
  rows = read_jsonl(path, ("text",))
  for number, row in enumerate(rows, 1):
    if not isinstance(row["text"], str) or not row["text"].strip():
      raise ValueError(f"{path}: passage {number}: 'text' must be a non-empty string")
  if not rows:
    raise ValueError(f"{path}: no passages")
  return [row["text"] for row in rows]


def design_requests(passages: list[str], selfplay: SelfPlayConfig,
                    max_chars: int) -> list[designer.DesignRequest]:
  """One request a passage: categories in turn, memory from the loop's library (train split)."""
  library = seed_entries(selfplay, split="train")
  requests = []
  for i, text in enumerate(passages):
    category = selfplay.skills[i % len(selfplay.skills)]
    pool = [e for e in library if e.category == category] or library
    turn = i // len(selfplay.skills)  # this category's turn: its entries in rotation
    picked = [pool[(turn + j) % len(pool)]
              for j in range(min(selfplay.memory_sample_size, len(pool)))]
    memory = tuple(e.view() for e in picked)
    requests.append(designer.DesignRequest(i, category, f"check/{i}", text[:max_chars], memory))
  return requests


def designer_gate(engine, pool, tokenizer, max_chars: int, selfplay: SelfPlayConfig,
                  passages: list[str], training_sources: set[str]) -> dict[str, Any]:
  """max_chars: config.corpus.max_chars (passages are cut as the loop cuts them)."""
  params = dataclasses.replace(selfplay.designer_sampling,
                               stop_token_ids=tuple(tokenizer.stop_ids))
  samples = designer.generate_designs(
      engine, pool, ChatFormatter(tokenizer),
      design_requests(passages, selfplay, max_chars), params,
      setting=selfplay.setting, step=0, timings=Timings(),
      max_prompt_tokens=selfplay.max_prompt_tokens(params), reward=selfplay.designer_reward,
      style=selfplay.designer_prompt)
  valid = [s for s in samples if s.valid]
  novel = [s for s in valid if variants.normalise_source(s.source) not in training_sources]
  errors: dict[str, int] = {}
  for s in samples:
    if s.error:
      errors[s.error] = errors.get(s.error, 0) + 1
  return {"designs": len(samples), "valid": len(valid), "valid_share": len(valid) / len(samples),
          "novel": len(novel), "novel_share_of_valid": len(novel) / len(valid) if valid else 0.0,
          "vendi_per_n": vendi_per_n([s.source for s in valid]) if valid else None,
          "errors": errors}


def agent_returns(engine, pool, tokenizer, cache_len: int, sampling: SamplingParams,
                  limit: int | None) -> dict[str, float]:
  """seed_games_heldout as the loop's agent plays: its reply cap and temperature."""
  generator = Generator(engine, tokenizer, SamplingParams(max_new_tokens=1), cache_len,
                        progress=False)
  summary = evaluate([SuiteRequest("seed_games_heldout", limit=limit)], generator, pool,
                     max_new_tokens=sampling.max_new_tokens,
                     temperature=sampling.temperature)["seed_games_heldout"]
  hint = float((summary.extra or {}).get("return_with_hint", float("nan")))
  return {"no_hint": float(summary.value), "hint": hint, "mean": (float(summary.value) + hint) / 2}


def check(directory: str | pathlib.Path, *, passages: str | None = None, designs: int = 64,
          episodes: int | None = None, config: str = "starter",
          progress: bool = True) -> dict[str, Any]:
  """Runs both gates on the built directory; the result has "passed" and each figure."""
  del progress  # the engine and suites report nothing per item here
  directory = pathlib.Path(directory)
  experiment = load_experiment(config)
  selfplay = experiment.selfplay
  texts = read_passages(passages) if passages else list(sft_data.heldout_passages(designs))
  texts = texts[:designs]
  tokenizer = load_tokenizer(directory)
  model = from_pretrained(directory, dtype="float32")
  copying = repeat_test(model)  # reported, not a gate
  training = {variants.normalise_source(s.source) for s in load_seed_library(selfplay.setting)}
  training |= {variants.normalise_source(e.source) for e in seed_entries(selfplay)}
  for name in ENV_FILES.values():
    env_file = directory / "stages" / name
    if env_file.is_file():
      training |= {variants.normalise_source(e.source) for e in variants.load_env_set(env_file)}
  engine = run.build_engine(experiment.engine, model, None)
  cache_len = experiment.engine.max_cache_len
  pool = run.build_pool(experiment)
  try:
    design = designer_gate(engine, pool, tokenizer, experiment.corpus.max_chars, selfplay, texts,
                           training)
    agent = agent_returns(engine, pool, tokenizer, cache_len, selfplay.agent_sampling, episodes)
    engine.load_weights(nnx.state(random_model(model.cfg, seed=1), nnx.Param))
    baseline = agent_returns(engine, pool, tokenizer, cache_len, selfplay.agent_sampling,
                             episodes)
  finally:
    pool.close()
  gates = {"valid": design["valid_share"] >= MIN_VALID_SHARE,
           "novel": design["valid"] > 0 and design["novel_share_of_valid"] >= MIN_NOVEL_SHARE,
           "agent_above_random": agent["mean"] > baseline["mean"],
           "hint_above_no_hint": agent["hint"] > agent["no_hint"]}
  return {"dir": str(directory), "designer": design, "agent": agent, "random_agent": baseline,
          "copying": copying, "gates": gates, "passed": all(gates.values())}
