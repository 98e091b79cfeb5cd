"""Host-side decoding and coercion of what an environment returned.

Everything that comes out of an episode process is untrusted bytes. These functions
turn one reply into a `EnvStep` (or an error record) with the contract's types:
observation -> valid Unicode str cut to MAX_OBS_CHARS, reward -> finite float (integers
too large for a float are bad output), flags -> bool, info -> JSON dict of bounded depth
and size without the framework's reserved keys, tools -> specs of bounded depth and size.
A reply nested deeper than MAX_REPLY_DEPTH is refused as it is decoded, so nothing that
reads it later can recurse past Python's limit. Text that a record quotes is valid Unicode,
so every record can be encoded as strict JSON and tokenised. The in-process `FakePool` uses
the same functions, so both pools give the same records for the same environment.
"""

from __future__ import annotations

import json
import math
from typing import Any

from spade_jax.sandbox import contract, schema
from spade_jax.sandbox.api import EnvStep, OracleActions

_ENV_ERROR_KINDS = ("exception", "bad_output")
CUT_MARK = "\n[observation cut]"


class BadOutput(ValueError):
  """A reply that breaks the contract; its message becomes the record's error_detail."""


def error_record(kind: str, detail: str) -> EnvStep:
  """An error record; lone surrogates in the detail (quoted environment text) become "?"."""
  detail = detail[:500].encode("utf-8", "replace").decode("utf-8")
  return EnvStep(observation="", reward=0.0, error_kind=kind, error_detail=detail)


def json_depth(value: Any) -> int:
  """How deep dicts and lists nest in `value` (a scalar is 0), found without recursion."""
  depth, level = 0, [value]
  while True:
    level = [v for v in level if isinstance(v, (dict, list))]
    if not level:
      return depth
    depth += 1
    level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]


def _unicode(text: str, what: str) -> str:
  """`text` unchanged; BadOutput when it holds a lone surrogate (JSON can escape one)."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as exc:
    raise BadOutput(f"{what} is not valid Unicode: a lone surrogate at character "
                    f"{exc.start}") from None
  return text


def decode(data: bytes) -> dict:
  """Parses one reply; raises BadOutput unless it is {"ok": ...} or {"err": kind, ...}."""
  try:
    msg = json.loads(data)
  except (ValueError, RecursionError) as exc:  # ValueError covers bad UTF-8
    raise BadOutput(f"reply is not JSON: {type(exc).__name__}: {exc}"[:300]) from None
  if not isinstance(msg, dict) or ("ok" in msg) == ("err" in msg):
    raise BadOutput("reply is neither a result nor an error")
  if json_depth(msg) > contract.MAX_REPLY_DEPTH:
    raise BadOutput(f"reply is nested deeper than {contract.MAX_REPLY_DEPTH} levels (info may "
                    f"nest {contract.MAX_INFO_DEPTH}, tool specs {contract.MAX_TOOLS_DEPTH})")
  return msg


def env_error(msg: dict) -> EnvStep:
  """The error record for an {"err": ...} reply; unknown kinds count as bad output."""
  kind = msg.get("err")
  detail = msg.get("detail")
  detail = detail if isinstance(detail, str) else ""
  return error_record(kind if kind in _ENV_ERROR_KINDS else "bad_output", detail)


def observation(value: Any) -> str:
  if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
    raise BadOutput(f"observation must be a str, got {type(value).__name__}")
  if isinstance(value, (int, float)):
    value = str(value)
  if len(value) > contract.MAX_OBS_CHARS:
    value = value[: contract.MAX_OBS_CHARS - len(CUT_MARK)] + CUT_MARK
  return _unicode(value, "observation")


def reward(value: Any) -> float:
  """A finite float; ints are converted, one too large for a float is bad output."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise BadOutput(f"reward must be a number, got {type(value).__name__}")
  try:
    value = float(value)
  except OverflowError:
    raise BadOutput("reward is an integer too large for a float") from None
  if not math.isfinite(value):
    raise BadOutput(f"reward must be finite, got {value}")
  return value


def check_return(total: float, steps: int) -> None:
  """BadOutput unless the running return after `steps` steps lies in [0, 1] (tolerance).

  The framework may end an episode after any step, so every running return must be a
  return the trainer can score; the detail starts with contract.RETURN_RANGE_ERROR.
  """
  if not -contract.RETURN_TOLERANCE <= total <= 1 + contract.RETURN_TOLERANCE:
    raise BadOutput(f"{contract.RETURN_RANGE_ERROR}: the episode return {total:g} after step "
                    f"{steps} is outside [0, 1]")


def flag(value: Any, name: str) -> bool:
  if value is None or isinstance(value, (bool, int, float)):
    return bool(value)
  raise BadOutput(f"{name} must be a bool, got {type(value).__name__}")


def info(value: Any) -> dict:
  """A JSON dict of bounded depth and size, less the framework's reserved keys."""
  if value is None:
    return {}
  if not isinstance(value, dict):
    raise BadOutput(f"info must be a dict, got {type(value).__name__}")
  _bounded(value, "info", contract.MAX_INFO_DEPTH, contract.MAX_INFO_CHARS)
  return {k: v for k, v in value.items() if k not in contract.RESERVED_INFO_KEYS}


def _bounded(value: Any, what: str, max_depth: int, max_chars: int) -> None:
  """BadOutput unless `value` nests at most max_depth deep and its JSON is short Unicode."""
  depth = json_depth(value)
  if depth > max_depth:
    raise BadOutput(f"{what} is nested {depth} levels deep > {max_depth}")
  text = _unicode(json.dumps(value, ensure_ascii=False), what)
  if len(text) > max_chars:
    raise BadOutput(f"{what} is {len(text)} characters of JSON > {max_chars}")


def _parts(value: Any, n: int, call: str) -> list:
  if not isinstance(value, list) or len(value) != n:
    got = f"a {len(value)}-tuple" if isinstance(value, list) else type(value).__name__
    raise BadOutput(f"{call} must return a {n}-tuple, got {got}")
  return value


def reset_result(value: Any) -> EnvStep:
  obs, inf = _parts(value, 2, "reset")
  return EnvStep(observation=observation(obs), info=info(inf))


def step_result(value: Any) -> EnvStep:
  obs, rew, term, trunc, inf = _parts(value, 5, "step")
  return EnvStep(observation=observation(obs), reward=reward(rew),
                    terminated=flag(term, "terminated"), truncated=flag(trunc, "truncated"),
                    info=info(inf))


def max_turns(value: Any) -> int | None:
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise BadOutput(f"max_turns must be a positive int, got {value!r}"[:200])
  return value


def difficulty_levels(value: Any) -> int | None:
  """None, or the declared number of difficulty levels (2..MAX_DIFFICULTY_LEVELS)."""
  if value is None:
    return None
  limit = contract.MAX_DIFFICULTY_LEVELS
  if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= limit:
    raise BadOutput(f"difficulty_levels must be an int from 2 to {limit}, got {value!r}"[:200])
  return value


def tools(value: Any) -> list | None:
  """Checks OpenAI function-calling specs: [{"type": "function", "function": {...}}]."""
  if value is None:
    return None
  if not isinstance(value, list) or not 1 <= len(value) <= contract.MAX_TOOLS:
    raise BadOutput(f"tools must be a list of 1..{contract.MAX_TOOLS} tool specs")
  _bounded(value, "tools", contract.MAX_TOOLS_DEPTH, contract.MAX_TOOLS_CHARS)
  names = set()
  for i, spec in enumerate(value):
    fn = spec.get("function") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or spec.get("type") != "function" or not isinstance(fn, dict):
      raise BadOutput(f'tools[{i}] must be {{"type": "function", "function": {{...}}}}')
    name, params = fn.get("name"), fn.get("parameters", {"type": "object"})
    if not isinstance(name, str) or not name.isidentifier():
      raise BadOutput(f"tools[{i}].function.name must be an identifier")
    if name in names:
      raise BadOutput(f"tools[{i}].function.name {name!r} is repeated")
    names.add(name)
    if not isinstance(fn.get("description", ""), str):
      raise BadOutput(f"tools[{i}].function.description must be a str")
    if not isinstance(params, dict) or params.get("type") != "object":
      raise BadOutput(f'tools[{i}].function.parameters must be a JSON schema with "type": "object"')
    try:
      schema.check_schema(params, f"tools[{i}].function.parameters")
    except schema.BadSchema as exc:
      raise BadOutput(str(exc)) from None
  return value


def oracle_actions(value: Any) -> list:
  """The actions of an oracle_actions() reply: a list of strs and tool-call dicts."""
  if not isinstance(value, list):
    raise BadOutput(f"oracle_actions() must return a list, got {type(value).__name__}")
  for action in value:
    call = isinstance(action, dict) and set(action) == {"name", "arguments"}
    if not (isinstance(action, str) or (call and isinstance(action["name"], str)
                                        and isinstance(action["arguments"], dict))):
      raise BadOutput(f"oracle_actions() returned {str(action)[:80]!r}, which is neither a str "
                      'action nor a tool call {"name": str, "arguments": dict}')
  return value


def oracle_result(msg: dict) -> OracleActions:
  """What a decoded oracle_actions() reply holds: the actions, or the error instead."""
  if "err" in msg:
    record = env_error(msg)
    return OracleActions(None, record.error_kind, record.error_detail)
  try:
    return OracleActions(oracle_actions(msg["ok"]))
  except BadOutput as exc:
    return OracleActions(None, "bad_output", str(exc))
