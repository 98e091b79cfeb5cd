"""The validation trial: which episodes the validator plays, and playing them as real ones.

Every episode of the trial runs through the pool's own episode calls (`reset`, `step`,
`oracle_actions`, `close_episodes`), exactly as the training loop drives one: a fresh
process per episode, each action sent by the host (cut and copied on the wire like an
agent's reply), the pool's own deadlines and coercion. Seeds and action sets are drawn at
random on every call from the distribution training seeds come from, so nothing an
environment can see (its seed, its actions, its process, its callers) tells a validation
episode from a real one, and the verdict is computed on the host from the records alone.

Episodes of one source (`Run.kind`):
  trial   every action set on every trial seed;
  replay  every action set again on the first trial seed, in another process;
  tool    one schema-valid call of each declared tool on the first two trial seeds, and
  plain   one plain text reply on the same seeds;
  oracle  the actions oracle_actions() returns after reset, fetched and sent back through
          the wire, on each probe seed (where the class defines it);
  probe   each degenerate policy of probes.py on each probe seed.
The first trial run (`opening`) is played alone first: most broken sources fail there, and
the tools its reset reports are what the tool runs call.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import random
from collections.abc import Hashable, Sequence
from typing import Protocol

from spade_jax.sandbox import contract, episodes, probes, schema
from spade_jax.sandbox.api import EnvStep, OracleActions

# Actions for the trial steps: numbers, words and moves, and odd strings (JSON-looking text
# included: in a tool-use environment it is a plain reply, calls arrive as dicts).
ACTION_POOLS = (
    ("0", "1", "2", "3", "5", "7", "10", "12", "15", "20", "50", "100", "-1"),
    ("yes", "no", "a", "b", "north", "south", "left", "right", "up", "down", "A1", "B2"),
    ("", "?", "1 2", "hello world", "[1, 2, 3]", '{"name": "noop", "arguments": {}}',
     '{"name": "search", "arguments": {"query": "a"}}', "x" * 100, "(1+2)*3", "ABC"),
)
PLAIN_REPLY = "Hello! Could you tell me what you need?"
_LABELS = {"trial": "", "replay": " replayed", "tool": " tool-call trial",
           "plain": " plain-reply trial", "oracle": " oracle_actions()"}
_KEYS = itertools.count()  # validation episodes' ids: unique within the pool, never shown


class EpisodePool(Protocol):
  """The episode calls of a pool (SandboxPool, FakePool, SplitPool) the trial plays through."""

  def reset(self, episodes: Sequence[tuple[Hashable, str, int]]) -> list[EnvStep]: ...

  def step(self, actions: Sequence[tuple[Hashable, str | dict]]) -> list[EnvStep]: ...

  def oracle_actions(self, episode_ids: Sequence[Hashable]) -> list[OracleActions]: ...

  def close_episodes(self, episode_ids: Sequence[Hashable]) -> None: ...


@dataclasses.dataclass(frozen=True)
class Draw:
  """The random part of one validation call: seeds and action sets."""

  seeds: tuple[int, ...]  # trial seeds
  probe_seeds: tuple[int, ...]  # oracle and probe seeds
  action_sets: tuple[tuple[str, ...], ...]  # one per ACTION_POOLS entry

  @classmethod
  def of(cls, seed: int | None) -> Draw:
    """Drawn from `seed`, or from the operating system's entropy when it is None."""
    rng = random.SystemRandom() if seed is None else random.Random(seed)
    seeds = rng.sample(range(contract.SEED_RANGE),
                       contract.VALIDATION_SEED_COUNT + contract.PROBE_SEED_COUNT)
    sets = tuple(tuple(rng.choice(pool) for _ in range(contract.VALIDATION_STEPS))
                 for pool in ACTION_POOLS)
    return cls(tuple(seeds[:contract.VALIDATION_SEED_COUNT]),
               tuple(seeds[contract.VALIDATION_SEED_COUNT:]), sets)


@dataclasses.dataclass
class Run:
  """One validation episode: what the host planned, sent and saw, and what the judge found."""

  source: int  # index of the source in the validate call
  kind: str  # trial | replay | oracle | probe | tool | plain
  seed: int
  set: int | None = None  # index of the action set (trial, replay)
  policy: str | None = None  # the degenerate policy (probe)
  planned: list = dataclasses.field(default_factory=list)  # the actions to send, if fixed
  actions: list = dataclasses.field(default_factory=list)  # the actions sent, in order
  records: list[EnvStep] = dataclasses.field(default_factory=list)  # reset, then each step
  oracle: OracleActions | None = None  # what oracle_actions() gave (oracle runs)
  key: Hashable = dataclasses.field(default_factory=lambda: ("validation", next(_KEYS)))
  problem: str | None = None
  fingerprint: tuple = ()
  total: float = 0.0

  def next_action(self) -> str | dict | None:
    """The action of the next turn, None when the run has none left."""
    turn = len(self.actions)
    if self.kind != "probe":
      return self.planned[turn] if turn < len(self.planned) else None
    if turn >= contract.PROBE_STEPS:
      return None
    return probes.probe_action(self.policy, self.records[0].observation,
                               self.records[-1].observation, turn)

  def where(self, i: int) -> str:
    """Names call i of the run for a reason: the seed, the step and its action."""
    label = (f" {probes.NAMES.get(self.policy, self.policy)} probe" if self.kind == "probe"
             else _LABELS[self.kind])
    run = f" of the{label} run" if label else ""
    if i == 0:
      return f"reset(seed={self.seed}){run}"
    action = json.dumps(self.actions[i - 1]) if i - 1 < len(self.actions) else "?"
    action = action if len(action) <= 80 else action[:77] + "..."
    return f"step {i}{run} (seed {self.seed}, action {action})"


def opening(source: int, draw: Draw) -> Run:
  """The source's first run (the first action set on the first trial seed), played alone:
  most broken sources fail there, and its reset tells the tools the rest of the plan calls."""
  return Run(source, "trial", draw.seeds[0], set=0, planned=list(draw.action_sets[0]))


def plan(first: Run, draw: Draw, has_oracle: bool, tools: list | None) -> list[Run]:
  """Every run of the source, `first` (its opening) included, in the order they are judged."""
  source = first.source
  runs = [first if (k, seed) == (0, draw.seeds[0]) else
          Run(source, "trial", seed, set=k, planned=list(actions))
          for k, actions in enumerate(draw.action_sets) for seed in draw.seeds]
  runs += [Run(source, "replay", draw.seeds[0], set=k, planned=list(actions))
           for k, actions in enumerate(draw.action_sets)]
  for seed in draw.seeds[:2] if tools else ():
    runs += [Run(source, "tool", seed, planned=[call]) for call in _tool_calls(tools)]
    runs.append(Run(source, "plain", seed, planned=[PLAIN_REPLY]))
  if has_oracle:
    runs += [Run(source, "oracle", seed) for seed in draw.probe_seeds]
  runs += [Run(source, "probe", seed, policy=policy)
           for policy in probes.PROBES for seed in draw.probe_seeds]
  return runs


def _tool_calls(tools: list) -> list[dict]:
  """One call of each declared tool (checked specs), with arguments that match its schema."""
  return [{"name": spec["function"]["name"],
           "arguments": schema.sample_value(spec["function"].get("parameters", {}))}
          for spec in tools]


def play(pool: EpisodePool, sources: Sequence[str], runs: list[Run],
         max_live: int = contract.VALIDATION_LIVE_EPISODES) -> None:
  """Plays the runs, at most `max_live` episodes at a time, filling in what the host saw."""
  waiting, live = collections.deque(runs), {}
  while waiting or live:
    starting = [waiting.popleft() for _ in range(min(len(waiting), max_live - len(live)))]
    _start(pool, sources, starting, live)
    _advance(pool, live)


def _start(pool: EpisodePool, sources: Sequence[str], runs: list[Run], live: dict) -> None:
  """Resets the runs' episodes; oracle runs then fetch their actions."""
  if not runs:
    return
  records = pool.reset([(run.key, sources[run.source], run.seed) for run in runs])
  for run, record in zip(runs, records, strict=True):
    run.records.append(record)
    if not record.done:
      live[run.key] = run
  oracles = [run for run in runs if run.kind == "oracle" and run.key in live]
  if oracles:
    answers = pool.oracle_actions([run.key for run in oracles])
    for run, answer in zip(oracles, answers, strict=True):
      run.oracle = _on_the_wire(answer)
      run.planned = run.oracle.actions or []


def _on_the_wire(answer: OracleActions) -> OracleActions:
  """The oracle's actions as an agent's reply reaches step: text cut, tool calls copied."""
  if answer.actions is None:
    return answer
  try:
    return OracleActions([episodes.wire_action(action) for action in answer.actions])
  except ValueError as exc:  # a tool call no agent reply can make
    return OracleActions(None, "bad_output", f"oracle_actions() returned {exc}")


def _advance(pool: EpisodePool, live: dict) -> None:
  """One step of every live run; runs without actions left are closed."""
  batch, finished = [], []
  for key, run in live.items():
    action = run.next_action()
    if action is None:
      finished.append(key)
    else:
      run.actions.append(action)
      batch.append((key, action))
  pool.close_episodes(finished)
  for key in finished:
    del live[key]
  if not batch:
    return
  for (key, _), record in zip(batch, pool.step(batch), strict=True):
    live[key].records.append(record)
    if record.done:
      del live[key]
