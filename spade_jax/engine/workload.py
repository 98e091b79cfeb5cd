"""Multi-turn jobs played through a conversation engine as the loop plays a phase.

A job is {"prompt": tokens, "budgets": [new tokens a turn], "obs": [tokens of each later
turn's observation]}: its prompt is submitted first, then each observation once the previous
turn is done, until its turns run out or its cache is full. The rollout benchmarks and the
engine's tests drive the engine this way.
"""

from __future__ import annotations

from typing import NamedTuple

from spade_jax.engine.api import Request, SamplingParams


class Played(NamedTuple):
  turns: int  # turns completed over every job
  tokens: int  # tokens generated


def play(engine, jobs: list[dict]) -> Played:
  """Every job to its last turn (or a full cache) through `engine`, a
  SlotConversationEngine; conversation i is job i, sampled with seed i."""
  turn, turns, tokens = {}, 0, 0
  for i, job in enumerate(jobs):
    engine.submit(Request(i, job["prompt"], SamplingParams(job["budgets"][0], seed=i)))
    turn[i] = 0
  while engine.pending():
    for c in engine.poll():
      i, job = c.conversation_id, jobs[c.conversation_id]
      turns, tokens = turns + 1, tokens + len(c.tokens)
      turn[i] += 1
      if turn[i] < len(job["budgets"]) and c.finish_reason != "cache_full":
        engine.submit(Request(i, job["obs"][turn[i] - 1],
                              SamplingParams(job["budgets"][turn[i]], seed=i)))
      else:
        engine.release(i)
  return Played(turns, tokens)
