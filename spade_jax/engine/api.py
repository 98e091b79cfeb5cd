"""The interface the self-play loop uses to sample from the policy.

A `ConversationEngine` keeps each conversation's KV cache in a decode slot between
turns, so a multi-turn episode only prefills the new tokens of every turn. Requests
are submitted and polled so that short agent turns and long designer outputs share
the slots (continuous batching) and the caller can step environments as soon as any
turn finishes. `spade_jax.engine.fake.FakeEngine` implements it without a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """How to sample one turn. temperature == 0 means greedy."""

  max_new_tokens: int
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0  # 0 = no top-k filter
  seed: int = 0
  stop_token_ids: tuple[int, ...] = ()
  stop_strings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Request:
  """Append `new_token_ids` to a conversation (new or cached) and sample a reply."""

  conversation_id: Hashable
  new_token_ids: Sequence[int]
  params: SamplingParams


@dataclasses.dataclass(frozen=True)
class Completion:
  """The sampled reply. logprobs are under the distribution actually sampled from."""

  conversation_id: Hashable
  tokens: list[int]
  logprobs: list[float]
  finish_reason: str  # "stop" | "length" | "cache_full"


class ConversationEngine(Protocol):
  """Slot-level sampler shared by the designer and agent rollouts."""

  def submit(self, request: Request) -> None:
    """Queues a turn; the conversation keeps its slot and cache if it has one."""

  def poll(self) -> list[Completion]:
    """Runs a block of decode steps; returns the turns finished since the last poll. A
    model engine may return a block's turns one poll later, reading it while the next
    block runs (double buffering), so the caller's work between polls overlaps decoding."""

  def pending(self) -> int:
    """Number of submitted turns not yet returned by poll."""

  def release(self, conversation_id: Hashable) -> None:
    """Frees the conversation's slot and cache."""

  def load_weights(self, params) -> None:
    """Samples from these parameters from now on (a model engine through its own copy)."""
