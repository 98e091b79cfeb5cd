"""Fakes shared by the self-play tests: byte tokenizer, scripted policies, trainer, corpus.

The scripted policy stands in for the model: designer turns return fixed environment
sources (by slot index), agent turns return fixed actions chosen from what the
conversation shows (environment tag, hint present or not, step). Everything is exact,
so the bookkeeping (regret, k-delay, refresh, masks) can be checked to the number.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable

import numpy as np

from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.memory import MemoryEntry
from spade_jax.tokenizer.base import CHAT_SPECIAL_TOKENS, Tokenizer
from spade_jax.tokenizer.chat_template import default_chat_template

REPLY_LOGPROB = -0.25  # every scripted token's behaviour log-prob


class ByteTokenizer(Tokenizer):
  """Special tokens get ids 0..8; every other byte b gets id 16 + b."""

  OFFSET = 16

  def __init__(self):
    self.chat_template = default_chat_template()
    self.special_tokens_map = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    self._special = {t: i for i, t in enumerate(CHAT_SPECIAL_TOKENS)}
    self._split = re.compile("(" + "|".join(map(re.escape, CHAT_SPECIAL_TOKENS)) + ")")

  def encode(self, text: str) -> list[int]:
    ids = []
    for piece in self._split.split(text):
      if piece in self._special:
        ids.append(self._special[piece])
      else:
        ids.extend(self.OFFSET + b for b in piece.encode("utf-8"))
    return ids

  def decode(self, ids) -> str:
    names = {i: t for t, i in self._special.items()}
    out, buf = [], bytearray()
    for i in ids:
      if i in names:
        out.append(buf.decode("utf-8", "replace"))
        buf = bytearray()
        out.append(names[i])
      else:
        buf.append(i - self.OFFSET)
    out.append(buf.decode("utf-8", "replace"))
    return "".join(out)

  def token_to_id(self, token: str) -> int | None:
    return self._special.get(token)

  @property
  def vocab_size(self) -> int:
    return self.OFFSET + 256


def env_source(tag: str, max_turns: int = 4, class_name: str = "TagEnv") -> str:
  """A 2-action environment: "win" scores 1, "half" 0.5, "probe" 0 and continues."""
  return f'''\
import random


class {class_name}:
  max_turns = {max_turns}

  def reset(self, seed=None):
    self.n = random.Random(seed).randint(0, 10**9)
    return "[env {tag}] instance " + str(self.n) + ". Say win.", {{}}

  def step(self, action):
    if action == "probe":
      return "probed " + str(self.n % 7), 0.0, False, False, {{}}
    if action == "win":
      return "you win", 1.0, True, False, {{}}
    if action == "half":
      return "half way", 0.5, True, False, {{}}
    return "you lose", 0.0, True, False, {{}}
'''


def designer_reply(tag: str, hint: str = "say win") -> str:
  return f"Here it is.\n```python\n{env_source(tag)}```\n<hint>{hint}</hint>"


AgentRule = Callable[[str, bool, int, int], str]  # (env tag, hinted, step, turn) -> action


class ScriptedPolicy:
  """reply_fn for FakeEngine: designer outputs by slot index, agent actions by a rule."""

  def __init__(self, tokenizer: ByteTokenizer, designs: dict[int, str], agent: AgentRule):
    self.tok, self.designs, self.agent = tokenizer, designs, agent
    self.designer_calls: list[tuple] = []

  def __call__(self, cid: Hashable, history: tuple[int, ...], params: SamplingParams):
    eos = self.tok.eos_id
    if cid[0] == "designer":
      self.designer_calls.append(cid)
      text = self.designs.get(cid[2], "no code here")
    else:
      step = cid[1][0]
      convo = self.tok.decode(history)
      tag = re.search(r"\[env (\w+)\]", convo).group(1)
      hinted = "Privileged hint" in convo
      turn = convo.count("<|im_start|>assistant") - 1
      text = self.agent(tag, hinted, step, turn)
    ids = self.tok.encode(text) + [eos]
    return ids, [REPLY_LOGPROB] * len(ids)


class FakeTrainer:
  """Records every batch; params is a counter the engine 'loads'."""

  def __init__(self):
    self.batches = []
    self.params = 0

  def train_step(self, batch):
    self.batches.append(batch)
    self.params += 1
    return {"loss": float(np.sum(batch.rewards)), "kl": 0.0}


class ListCorpus:
  def __init__(self):
    self.pos = 0

  def take(self, n):
    from spade_jax.selfplay.corpus import Passage
    out = [Passage(f"doc{self.pos + i}", f"passage number {self.pos + i}") for i in range(n)]
    self.pos += n
    return out

  def state_dict(self):
    return {"pos": self.pos}

  def load_state_dict(self, state):
    self.pos = state["pos"]


def seed_library(tags=("S1", "S2"), categories=("s1", "s2")) -> list[MemoryEntry]:
  return [MemoryEntry(f"seed/{tag}", env_source(tag), "say win", cat, "seed", -1, max_turns=4)
          for tag, cat in zip(tags, categories, strict=True)]


def make_settings(**overrides) -> SelfPlayConfig:
  base = dict(skills=("s1", "s2"), seed=0, num_envs=2, k=2, group_size=2,
              categories_per_step=1, max_turns=3,
              designer_sampling=SamplingParams(max_new_tokens=4000),
              agent_sampling=SamplingParams(max_new_tokens=64))
  return SelfPlayConfig(**{**base, **overrides})


def make_engine(policy: ScriptedPolicy) -> FakeEngine:
  return FakeEngine(policy, num_slots=6, steps_per_poll=64)
