"""A SPADE environment as a `gymnasium.Env`, run in the sandbox pool.

`SandboxTextEnv(source)` wraps one environment source (a seed, a designed environment, a
line of an exported curriculum: see `spade_jax.export`) so that Gymnasium- or GEM-style
trainers can play it: observations and actions are text (`TextSpace`), rewards floats, and
`info` is the environment's own dict. The source never runs in the caller's process: every
reset and step goes to a `SandboxPool` (one of its own, or one shared by many adapters), as
generated code must. `from_curriculum_line(line)` builds the adapter from an exported line.

An environment error (timeout, crash, bad output) in `step` ends the episode with reward 0
and the error in `info["error"]`; in `reset` it raises, since there is no episode to end.
"""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Mapping
from typing import Any

import gymnasium

from spade_jax.sandbox import contract
from spade_jax.sandbox.api import EnvPool, EnvStep
from spade_jax.sandbox.coerce import CUT_MARK
from spade_jax.sandbox.pool import SandboxPool

_IDS = itertools.count()


class TextSpace(gymnasium.spaces.Text):
  """Any string up to `max_length` characters (samples use printable ASCII)."""

  def __init__(self, max_length: int, seed: int | None = None):
    super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

  def contains(self, x: Any) -> bool:
    return isinstance(x, str) and len(x) <= self.max_length


class SandboxTextEnv(gymnasium.Env):
  """One environment source behind the Gymnasium API (module docstring)."""

  metadata = {"render_modes": []}

  def __init__(self, source: str, *, pool: EnvPool | None = None, max_turns: int | None = None):
    self.source = source
    self._own_pool = pool is None
    if pool is None:
      pool = SandboxPool(num_workers=1, max_turns=max_turns or contract.MAX_TURNS_CAP)
    self.pool = pool
    self.observation_space = TextSpace(contract.MAX_OBS_CHARS + len(CUT_MARK))
    self.action_space = TextSpace(contract.MAX_ACTION_CHARS)
    self._episode: tuple[str, int] | None = None

  def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
    super().reset(seed=seed)
    self._end_episode()
    env_seed = seed if seed is not None else int(self.np_random.integers(2**31))
    episode = ("gym", next(_IDS))
    (first,) = self.pool.reset([(episode, self.source, env_seed)])
    if first.error_kind is not None:
      raise RuntimeError(f"the environment failed in reset(seed={env_seed}): "
                         f"{first.error_kind}: {first.error_detail}")
    self._episode = None if first.done else episode
    return first.observation, dict(first.info)

  def step(self, action: str):
    if self._episode is None:
      raise RuntimeError("step() before reset() or after the episode ended")
    (result,) = self.pool.step([(self._episode, str(action))])
    if result.done:
      self._episode = None  # the pool closes a done episode itself
    return (result.observation, float(result.reward), result.terminated or _failed(result),
            result.truncated, _info(result))

  def close(self) -> None:
    self._end_episode()
    if self._own_pool and self.pool is not None:
      self.pool.close()
      self.pool = None

  def _end_episode(self) -> None:
    if self._episode is not None and self.pool is not None:
      self.pool.close_episodes([self._episode])
    self._episode = None


def _failed(result: EnvStep) -> bool:
  return result.error_kind is not None


def _info(result: EnvStep) -> dict:
  info = dict(result.info)
  if result.error_kind is not None:
    info["error"] = f"{result.error_kind}: {result.error_detail}"
  return info


def from_curriculum_line(line: Mapping[str, Any] | str, *, pool: EnvPool | None = None,
                         max_turns: int | None = None) -> SandboxTextEnv:
  """The adapter for one line of `python -m spade_jax.export` output: the parsed dict or
  the raw JSON line as read from the file."""
  if isinstance(line, str):
    try:
      line = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"curriculum line is not JSON ({e}): {line[:80]!r}") from None
  if not isinstance(line, Mapping):
    raise ValueError(f"curriculum line must be a JSON object, got {type(line).__name__}")
  if not isinstance(line.get("source"), str):
    raise ValueError(f"curriculum line {line.get('uid')!r} has no 'source' string")
  return SandboxTextEnv(line["source"], pool=pool, max_turns=max_turns)
