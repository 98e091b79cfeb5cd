"""Runs one environment's calls and turns their results into JSON messages.

This module is the only code that touches an environment object. It runs inside a
sandboxed episode process (the worker ships its source text into the jail, so it must
import nothing but the standard library) and, for tests only, inside `FakePool`.
Nothing here is trusted by the host: every message it produces is decoded, coerced and
checked again on the host side (`coerce.py`).

Messages are dicts: `{"ok": [...]}` with the raw return value of `reset` / `step`, or
`{"err": kind, "detail": text}` with kind "exception" or "bad_output".
"""

import json

ENV_FILENAME = "<env>"
_DETAIL_CHARS = 400


def error(kind: str, detail: str) -> dict:
  return {"err": kind, "detail": detail[:_DETAIL_CHARS]}


def describe_exception(exc: BaseException) -> str:
  """`Type: message (line N)`, with N the innermost line of the environment's source."""
  line = None
  tb = exc.__traceback__
  while tb is not None:
    if tb.tb_frame.f_code.co_filename == ENV_FILENAME:
      line = tb.tb_lineno
    tb = tb.tb_next
  try:
    text = f"{type(exc).__name__}: {str(exc)[:_DETAIL_CHARS]}"
  except BaseException:  # a hostile __str__
    text = type(exc).__name__
  return text if line is None else f"{text} (line {line})"


def load_class(source: str, class_name: str) -> type:
  """Executes the source in a fresh module namespace and returns the named class."""
  namespace = {"__name__": "__env__", "__builtins__": __builtins__}
  exec(compile(source, ENV_FILENAME, "exec"), namespace)  # noqa: S102 (sandboxed)
  cls = namespace.get(class_name)
  if not isinstance(cls, type):
    raise TypeError(f"class {class_name!r} is not defined after running the source")
  return cls


def env_attributes(cls: type) -> dict:
  """The optional class attributes the framework reads: max_turns, tools, difficulty_levels."""
  attrs = {}
  for name in ("max_turns", "tools", "difficulty_levels"):
    if name in dir(cls):
      attrs[name] = getattr(cls, name)
  return attrs


def call(obj, method: str | None, *args) -> dict:
  """Calls `obj.method(*args)` (or `obj(*args)`) and wraps the result or exception."""
  try:
    return {"ok": (obj if method is None else getattr(obj, method))(*args)}
  except BaseException as exc:  # SystemExit and KeyboardInterrupt are the env's too
    return error("exception", describe_exception(exc))


def cut_observation(msg: dict, max_obs_chars: int) -> dict:
  """Shortens a string observation before encoding, so a huge one costs little to send."""
  value = msg.get("ok")
  if isinstance(value, (tuple, list)) and value and type(value[0]) is str:
    if len(value[0]) > max_obs_chars + 1:
      value = [value[0][: max_obs_chars + 1], *value[1:]]
      msg = {"ok": value}
  return msg


def encode(msg: dict, max_bytes: int) -> bytes:
  """JSON-encodes a message; values that are not JSON become a bad_output message."""
  try:
    data = json.dumps(msg, ensure_ascii=False, allow_nan=True).encode("utf-8", "replace")
  except BaseException as exc:
    data = json.dumps(error("bad_output", f"result is not JSON: {describe_exception(exc)}"))
    return data.encode()
  if len(data) > max_bytes:
    return json.dumps(error("bad_output", f"result is {len(data)} bytes > {max_bytes}")).encode()
  return data


class EnvInstance:
  """One environment instance; `reset` loads the class on first use."""

  def __init__(self, source: str, class_name: str, limits: dict):
    self.source = source
    self.class_name = class_name
    self.limits = limits
    self.env = None

  def _finish(self, msg: dict) -> bytes:
    return encode(cut_observation(msg, self.limits["max_obs_chars"]), self.limits["max_msg_bytes"])

  def reset(self, seed) -> bytes:
    try:
      cls = load_class(self.source, self.class_name)
      self.env = cls()
      attrs = env_attributes(cls)
    except BaseException as exc:
      return self._finish(error("exception", describe_exception(exc)))
    msg = call(self.env, "reset", seed)
    if "ok" in msg:
      msg["attrs"] = attrs
    return self._finish(msg)

  def step(self, action: str) -> bytes:
    if self.env is None:
      return encode(error("exception", "step before a successful reset"), 1024)
    return self._finish(call(self.env, "step", action))

  def oracle(self) -> bytes:
    """{"ok": the actions oracle_actions() returns now}, or why there are none (an error)."""
    if self.env is None:
      return encode(error("exception", "oracle_actions before a successful reset"), 1024)
    made = call(self.env, "oracle_actions")
    if "err" in made:
      return encode(made, 1024)
    actions = made["ok"]
    if not isinstance(actions, (list, tuple)):
      detail = f"oracle_actions() must return a list, got {type(actions).__name__}"
      return encode(error("bad_output", detail), 1024)
    for action in actions[:MAX_ORACLE_STEPS]:
      if not _is_action(action):
        return encode(error("bad_output", f"oracle_actions() returned {_describe(action)}, which "
                            'is neither a str action nor a JSON tool call {"name": str, '
                            '"arguments": dict}'), 1024)
    return encode({"ok": list(actions[:MAX_ORACLE_STEPS])}, self.limits["max_msg_bytes"])


MAX_ORACLE_STEPS = 64


def _is_action(action) -> bool:
  """A str, or a tool call {"name": str, "arguments": dict} that is JSON."""
  if isinstance(action, str):
    return True
  if not (isinstance(action, dict) and set(action) == {"name", "arguments"}
          and isinstance(action["name"], str) and isinstance(action["arguments"], dict)):
    return False
  try:
    json.dumps(action)
  except BaseException:
    return False
  return True


def _describe(value) -> str:
  try:
    return repr(value)[:80]
  except BaseException:  # a hostile __repr__
    return type(value).__name__
