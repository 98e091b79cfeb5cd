"""The interface the self-play loop uses to run generated environments.

Every call is batched, never raises for anything an environment does, and reports
each episode's failure as a record. `error_kind == "infra"` marks failures of the
sandbox itself (a worker could not be started, the host ran out of resources): the
loop drops such episodes instead of scoring them.
`spade_jax.sandbox.fake.FakePool` implements it in-process for tests of the loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Protocol

ERROR_KINDS = ("timeout", "crash", "exception", "bad_output", "infra")


@dataclasses.dataclass(frozen=True)
class EnvStep:
  """One reset or step of one episode, coerced and checked on the host side."""

  observation: str
  reward: float = 0.0
  terminated: bool = False
  truncated: bool = False
  info: dict = dataclasses.field(default_factory=dict)
  error_kind: str | None = None  # one of ERROR_KINDS, None when the call succeeded
  error_detail: str = ""

  @property
  def done(self) -> bool:
    return self.terminated or self.truncated or self.error_kind is not None

  @property
  def infra_error(self) -> bool:
    return self.error_kind == "infra"


@dataclasses.dataclass(frozen=True)
class OracleActions:
  """What a live episode's oracle_actions() returned: its actions, or the error instead."""

  actions: list | None  # strs and tool calls {"name", "arguments"}; None when it failed
  error_kind: str | None = None  # one of ERROR_KINDS when it failed
  error_detail: str = ""


@dataclasses.dataclass(frozen=True)
class ValidationResult:
  valid: bool
  reason: str | None = None  # names the rule and, where there is one, the line
  line: int | None = None
  class_name: str | None = None
  max_turns: int | None = None
  difficulty_levels: int | None = None  # declared levels (contract: optional attribute)


class EnvPool(Protocol):
  def validate(self, sources: Sequence[str]) -> list[ValidationResult]:
    """Checks each source against the environment contract (see contract.py)."""

  def reset(self, episodes: Sequence[tuple[Hashable, str, int]]) -> list[EnvStep]:
    """Starts episodes (episode_id, source, seed) in fresh interpreter state each."""

  def step(self, actions: Sequence[tuple[Hashable, str | dict]]) -> list[EnvStep]:
    """Advances live episodes by one action each (text, or a tool call {"name",
    "arguments"}); a done episode is closed."""

  def close_episodes(self, episode_ids: Sequence[Hashable]) -> None:
    """Ends live episodes early and frees their workers."""

  def close(self) -> None:
    """Stops every worker; no process is left behind."""
