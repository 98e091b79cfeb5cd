"""Host-side bookkeeping of live episodes, shared by the real and the fake pool.

The ledger turns decoded replies into `EnvStep`s and applies the framework's rules:
truncation after min(env max_turns, configured cap) steps, the range check of the running
return after every step (an episode that leaves [0, 1] ends with an error record), the
framework's keys in the reset record's info (`max_turns`, and `tools` and `difficulty_levels`
from the class attributes only), and closing an episode once it is done.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
from collections.abc import Hashable

from spade_jax.sandbox import coerce, contract, pyparse
from spade_jax.sandbox.api import EnvStep

CLASS_COUNT = "the source must define exactly one class"


def find_class(source: str) -> tuple[str | None, str]:
  """(name of the single top-level class, "") or (None, why there is no such class)."""
  if not isinstance(source, str):
    return None, f"the source must be a str, got {type(source).__name__}"
  return _find_class(source)


def seed_value(seed) -> int | None:
  """The seed as a plain int (numpy integers included) or None; ValueError otherwise."""
  if seed is None:
    return None
  if isinstance(seed, bool) or int(seed) != seed:
    raise ValueError(f"seed must be an int or None, got {seed!r}"[:200])
  return int(seed)


def wire_action(action: str | dict) -> str | dict:
  """The action as `step` receives it: text cut to MAX_ACTION_CHARS, or a tool call dict.

  A tool call must be {"name": str, "arguments": dict} of at most MAX_ACTION_CHARS characters
  of JSON (the reply parser guarantees it); anything else is the caller's bug: ValueError.
  """
  if not isinstance(action, dict):
    return str(action)[: contract.MAX_ACTION_CHARS]
  if (set(action) != {"name", "arguments"} or not isinstance(action["name"], str)
      or not isinstance(action["arguments"], dict)):
    raise ValueError(f'a tool call must be {{"name": str, "arguments": dict}}, got {action!r}'
                     [:300])
  size = len(json.dumps(action))
  if size > contract.MAX_ACTION_CHARS:
    raise ValueError(f"a tool call of {size} characters of JSON > {contract.MAX_ACTION_CHARS}")
  return json.loads(json.dumps(action))  # a copy, as the real pool's JSON round trip makes


@functools.lru_cache(maxsize=256)
def _find_class(source: str) -> tuple[str | None, str]:
  if len(source) > contract.MAX_SOURCE_CHARS:
    return None, f"source is {len(source)} characters > {contract.MAX_SOURCE_CHARS}"
  try:
    tree = pyparse.parse(source, filename="<env>")
  except SyntaxError as exc:
    return None, f"SyntaxError: {exc.msg}" + (f" (line {exc.lineno})" if exc.lineno else "")
  except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
    return None, f"source cannot be parsed: {type(exc).__name__} {exc}"
  classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
  if len(classes) != 1:
    return None, f"{CLASS_COUNT}, found {len(classes)}"
  return classes[0].name, ""


@dataclasses.dataclass
class _Episode:
  max_turns: int
  turns: int = 0
  total: float = 0.0


class Ledger:
  """Live episodes by id: turn counts, returns and effective turn limits."""

  def __init__(self, max_turns: int):
    self.max_turns = min(max_turns, contract.MAX_TURNS_CAP)
    self.live: dict[Hashable, _Episode] = {}

  def reset_record(self, episode_id: Hashable, msg: dict) -> EnvStep:
    """Record for a reset reply; the episode is live afterwards unless it failed."""
    self.live.pop(episode_id, None)
    if "err" in msg:
      return coerce.env_error(msg)
    try:
      attrs = msg.get("attrs")
      attrs = attrs if isinstance(attrs, dict) else {}
      env_max = coerce.max_turns(attrs.get("max_turns"))
      tools = coerce.tools(attrs.get("tools"))
      levels = coerce.difficulty_levels(attrs.get("difficulty_levels"))
      record = coerce.reset_result(msg["ok"])
    except coerce.BadOutput as exc:
      return coerce.error_record("bad_output", str(exc))
    limit = self.max_turns if env_max is None else min(env_max, self.max_turns)
    info = dict(record.info, max_turns=limit)
    if tools is not None:
      info["tools"] = tools
    if levels is not None:
      info["difficulty_levels"] = levels
    self.live[episode_id] = _Episode(max_turns=limit)
    return dataclasses.replace(record, info=info)

  def step_record(self, episode_id: Hashable, msg: dict) -> EnvStep:
    """Record for a step reply; a done episode leaves the ledger (caller frees its process)."""
    episode = self.live.pop(episode_id)
    if "err" in msg:
      return coerce.env_error(msg)
    try:
      record = coerce.step_result(msg["ok"])
      episode.turns += 1
      episode.total += record.reward
      coerce.check_return(episode.total, episode.turns)
    except coerce.BadOutput as exc:
      return coerce.error_record("bad_output", str(exc))
    if not record.done and episode.turns >= episode.max_turns:
      record = dataclasses.replace(record, truncated=True)
    if not record.done:
      self.live[episode_id] = episode
    return record

  def unknown(self, episode_id: Hashable) -> EnvStep | None:
    """An infra record when `episode_id` is not live (never reset, or already done)."""
    if episode_id in self.live:
      return None
    return coerce.error_record("infra", f"episode {episode_id!r} is not live")
