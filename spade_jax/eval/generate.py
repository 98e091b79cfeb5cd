"""Sampling chat replies through the project's engine (continuous batching).

`Generator.sample` submits every (prompt, sample) conversation at once; the engine keeps
`num_slots` of them decoding and admits the next as soon as one finishes. Prompts are
rendered with the tokenizer's own chat template (`selfplay.chat.ChatFormatter`). A prompt
that leaves no room for the reply in the engine's cache is not sampled: its reply is ""
(it scores 0 and shows up as having no answer).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from tqdm import tqdm

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.selfplay.chat import ChatFormatter


@dataclasses.dataclass
class Generator:
  """The engine, tokenizer and per-turn sampling settings of one evaluation run."""

  engine: object  # an engine.api.ConversationEngine
  tokenizer: object
  params: SamplingParams
  max_cache_len: int
  progress: bool = True

  def __post_init__(self):
    self.formatter = ChatFormatter(self.tokenizer)
    self.params = dataclasses.replace(self.params,
                                      stop_token_ids=tuple(self.tokenizer.stop_ids))
    self._calls = 0

  def for_suite(self, sampling, **overrides) -> Generator:
    """This generator with a suite's sampling defaults, then the non-None `overrides`."""
    values = {"max_new_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
              "top_p": sampling.top_p, "top_k": sampling.top_k}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return dataclasses.replace(self, params=dataclasses.replace(self.params, **values))

  def decode_reply(self, tokens: Sequence[int], finish_reason: str) -> str:
    """The reply text without the stop token that ended it."""
    stopped = tokens and finish_reason == "stop" and tokens[-1] in self.params.stop_token_ids
    return self.tokenizer.decode(list(tokens[:-1]) if stopped else list(tokens))

  def fits(self, prompt_ids: Sequence[int]) -> bool:
    return len(prompt_ids) + 1 < self.max_cache_len

  def sample(self, prompts: Sequence[Sequence[dict]], samples: int) -> list[list[str]]:
    """`samples` replies to each chat prompt, in order."""
    self._calls += 1
    out = [[""] * samples for _ in prompts]
    todo = []
    for i, messages in enumerate(prompts):
      ids = self.formatter.prompt_ids(messages)
      if self.fits(ids):
        todo.extend(((self._calls, i, j), ids) for j in range(samples))
    for n, (cid, ids) in enumerate(todo):
      seed = self.params.seed + 7919 * n
      self.engine.submit(Request(cid, ids, dataclasses.replace(self.params, seed=seed)))
    with tqdm(total=len(todo), disable=not self.progress, file=sys.stderr,
              desc="sampling", leave=False) as bar:
      while self.engine.pending():
        for comp in self.engine.poll():
          _, i, j = comp.conversation_id
          out[i][j] = self.decode_reply(comp.tokens, comp.finish_reason)
          self.engine.release(comp.conversation_id)
          bar.update(1)
    return out
