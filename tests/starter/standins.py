"""Stand-ins for starter-data's API (spade_jax/starter/variants.py, sft_data.py), tests only.

Installed into sys.modules only when the real modules are missing (`install()`), so these
tests run on a branch without them and use the real ones once they are merged. They build
SFTExample-shaped data from the train seed games in the loop's real prompts.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
import types

from spade_jax.envs.library import load_seed_library
from spade_jax.selfplay import prompts
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.science_corpus import load_corpus


@dataclasses.dataclass(frozen=True)
class VariantEnv:
  uid: str
  base: str
  category: str
  source: str
  hint: str


@dataclasses.dataclass(frozen=True)
class SFTExample:
  tokens: list[int]
  loss_mask: list[int]
  role: str
  meta: dict


def build_env_set(out_path, *, count=320, seed=0, num_workers=2, progress=True):
  seeds = load_seed_library("games", split="train")
  envs = [VariantEnv(f"{s.name}-{i}", s.name, s.category, s.source, s.hint)
          for i, s in enumerate((seeds * (count // len(seeds) + 1))[:count])]
  with open(out_path, "w", encoding="utf-8") as f:
    for env in envs:
      f.write(json.dumps(dataclasses.asdict(env)) + "\n")
  return envs


def load_env_set(path):
  with open(path, encoding="utf-8") as f:
    return [VariantEnv(**json.loads(line)) for line in f]


def normalise_source(source: str) -> str:
  return re.sub(r"\s+", " ", re.sub(r"#[^\n]*", "", source)).strip()


def _passages():
  return [d["text"][:600] for d in load_corpus()]


def train_passages():
  return _passages()[:-64]


def heldout_passages(n):
  return _passages()[-64:][:n]


def _example(tok, messages, reply, role):
  prompt = ChatFormatter(tok).prompt_ids(messages)
  out = tok.encode(reply) + [tok.eos_id]
  return SFTExample(prompt + out, [0] * len(prompt) + [1] * len(out), role, {})


def designer_examples(envs, tokenizer, settings, *, seed=0, per_env=1):
  passages = train_passages()
  return [_example(tokenizer, prompts.designer_messages(
      env.category, passages[i % len(passages)], (), settings.setting),
      f"```python\n{env.source}```\n<hint>{env.hint}</hint>", "designer")
      for i, env in enumerate(envs)]


def agent_examples(envs, tokenizer, settings, pool, *, seed=0, imperfect_share=0.25):
  return [_example(tokenizer, prompts.agent_messages("You see 3 coins.", settings.action_format,
                                                     env.hint if i % 2 else None),
                   settings.action_format.format("1"), "agent")
          for i, env in enumerate(envs)]


def install() -> None:
  """Puts these stand-ins in sys.modules where starter-data's modules are not importable."""
  here = sys.modules[__name__]
  for name, attrs in (("variants", ("VariantEnv", "build_env_set", "load_env_set",
                                    "normalise_source")),
                      ("sft_data", ("SFTExample", "designer_examples", "agent_examples",
                                    "train_passages", "heldout_passages"))):
    full = f"spade_jax.starter.{name}"
    try:
      importlib.import_module(full)
    except ModuleNotFoundError:
      module = types.ModuleType(full)
      for attr in attrs:
        setattr(module, attr, getattr(here, attr))
      sys.modules[full] = module
