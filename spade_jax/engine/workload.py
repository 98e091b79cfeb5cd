"""Multi-turn jobs played through a conversation engine as the loop plays a phase.

A job is {"prompt": tokens, "budgets": [new tokens a turn], "obs": [tokens of each later
turn's observation]}: its prompt is submitted first, then each observation once the previous
turn is done, until its turns run out or its cache is full. The rollout benchmarks and the
engine's tests drive the engine this way.
"""

from __future__ import annotations

import contextlib
import time
from typing import NamedTuple

from spade_jax.engine.api import Request, SamplingParams


class Played(NamedTuple):
  turns: int  # turns completed over every job
  tokens: int  # tokens generated


def play(engine, jobs: list[dict], sandbox_s: float = 0.0, timings=None) -> Played:
  """Every job to its last turn (or a full cache) through `engine`, a
  SlotConversationEngine; conversation i is job i, sampled with seed i.

  sandbox_s: host time after each poll that returned turns, as the episodes' sandbox round
  takes it (a sleep: the host busy elsewhere, the device free). `timings` (a
  selfplay.timing.Timings) gets the seconds in the engine (generate_s) and in that round
  (sandbox_s), as a self-play step's time/* splits them."""
  phase = timings.phase if timings is not None else lambda _: contextlib.nullcontext()
  turn, turns, tokens = {}, 0, 0
  for i, job in enumerate(jobs):
    engine.submit(Request(i, job["prompt"], SamplingParams(job["budgets"][0], seed=i)))
    turn[i] = 0
  while engine.pending():
    with phase("generate_s"):
      done = engine.poll()
    if done and sandbox_s:
      with phase("sandbox_s"):
        time.sleep(sandbox_s)
    for c in done:
      i, job = c.conversation_id, jobs[c.conversation_id]
      turns, tokens = turns + 1, tokens + len(c.tokens)
      turn[i] += 1
      if turn[i] < len(job["budgets"]) and c.finish_reason != "cache_full":
        engine.submit(Request(i, job["obs"][turn[i] - 1],
                              SamplingParams(job["budgets"][turn[i]], seed=i)))
      else:
        engine.release(i)
  return Played(turns, tokens)
