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
import time

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
  """The optional class attributes the framework reads: max_turns and tools."""
  attrs = {}
  for name in ("max_turns", "tools"):
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


def validation_run(source: str, class_name: str, plan: dict, limits: dict) -> bytes:
  """Plays the validator's plan and returns every raw result with its duration.

  plan: {"seeds": [...], "action_sets": [[...], ...]}; for every action set and seed a
  fresh instance is reset with the seed and stepped through the actions until done;
  finally the first seed is reset once more on a fresh instance to check determinism.
  """
  try:
    cls = load_class(source, class_name)
    attrs = env_attributes(cls)
  except BaseException as exc:
    return encode(error("exception", describe_exception(exc)), limits["max_msg_bytes"])
  seeds = list(plan["seeds"])
  jobs = [(k, seed, actions) for k, actions in enumerate(plan["action_sets"]) for seed in seeds]
  jobs.append((-1, seeds[0], []))
  runs = []
  for k, seed, actions in jobs:
    run = {"seed": seed, "set": k, "calls": []}
    runs.append(run)
    start = time.perf_counter()
    made = call(cls, None)
    if "err" in made:
      run["calls"].append([made, time.perf_counter() - start])
      break
    msg = cut_observation(call(made["ok"], "reset", seed), limits["max_obs_chars"])
    run["calls"].append([msg, time.perf_counter() - start])
    for action in actions:
      if "err" in msg:
        break
      start = time.perf_counter()
      msg = cut_observation(call(made["ok"], "step", action), limits["max_obs_chars"])
      run["calls"].append([msg, time.perf_counter() - start])
      if "ok" in msg and not _continues(msg["ok"]):
        break
  return encode({"ok": {"attrs": attrs, "runs": runs}}, limits["max_msg_bytes"])


def _continues(result) -> bool:
  """False when a step result says the episode ended (or is malformed: the host judges)."""
  try:
    return not (result[2] or result[3])
  except BaseException:
    return False

