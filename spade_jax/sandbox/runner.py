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
import re
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
    run = {}
    actions = _oracle_actions(self.env, run)
    outcome = run["oracle"]
    if "err" in outcome:
      return encode(outcome, 1024)
    if outcome["type"] not in ("list", "tuple") or "bad" in outcome:
      detail = outcome.get("bad", f"a {outcome['type']}, not a list")
      return encode(error("bad_output", f"oracle_actions() returned {detail}"), 1024)
    return encode({"ok": actions}, self.limits["max_msg_bytes"])


def validation_run(source: str, class_name: str, trial: dict, limits: dict) -> bytes:
  """Plays the validator's trial and returns every raw result with its duration.

  Every episode runs on a fresh instance; each run records its kind, seed, the actions it
  sent and the raw results of reset and each step. Kinds (validate.py judges them):
    trial   every action set of the trial on every seed;
    replay  every action set again on the first seed (determinism of whole episodes);
    tool    one schema-valid call of each declared tool on the first two seeds, and
    plain   one plain text reply on the same seeds (a tool call must not be answered so);
    oracle  the actions oracle_actions() returns after reset, on each probe seed;
    probe   a degenerate policy (empty replies, the first observation's example action,
            one reply stuffed with candidate answers) on each probe seed.
  """
  try:
    cls = load_class(source, class_name)
    attrs = env_attributes(cls)
  except BaseException as exc:
    return encode(error("exception", describe_exception(exc)), limits["max_msg_bytes"])
  runs = []
  for job in _jobs(trial, attrs, "oracle_actions" in dir(cls)):
    run = _play(cls, job, limits["max_obs_chars"])
    runs.append(run)
    if "err" in run["calls"][0][0] and run["calls"][0][0].get("stage") == "init":
      break  # the class cannot even be constructed: nothing else can run
  reply = {"attrs": attrs, "has_oracle": "oracle_actions" in dir(cls), "runs": runs}
  return encode({"ok": reply}, limits["max_msg_bytes"])


def _jobs(trial: dict, attrs: dict, has_oracle: bool) -> list[dict]:
  seeds, probe_seeds = list(trial["seeds"]), list(trial["probe_seeds"])
  jobs = [{"kind": "trial", "set": k, "seed": seed, "actions": actions}
          for k, actions in enumerate(trial["action_sets"]) for seed in seeds]
  jobs += [{"kind": "replay", "set": k, "seed": seeds[0], "actions": actions}
           for k, actions in enumerate(trial["action_sets"])]
  calls = tool_calls(attrs.get("tools"))
  for seed in seeds[:2] if calls else ():
    jobs += [{"kind": "tool", "seed": seed, "actions": [c]} for c in calls]
    jobs.append({"kind": "plain", "seed": seed, "actions": [trial["plain_reply"]]})
  if has_oracle:
    jobs += [{"kind": "oracle", "seed": seed} for seed in probe_seeds]
  steps = attrs.get("max_turns")
  steps = min(steps, trial["probe_steps"]) if type(steps) is int and steps > 0 else trial[
      "probe_steps"]
  jobs += [{"kind": "probe", "policy": policy, "seed": seed, "steps": steps}
           for policy in trial["probes"] for seed in probe_seeds]
  return jobs


def _play(cls: type, job: dict, max_obs_chars: int) -> dict:
  run = {"kind": job["kind"], "seed": job["seed"], "set": job.get("set"),
         "policy": job.get("policy"), "actions": [], "calls": []}
  start = time.perf_counter()
  made = call(cls, None)
  if "err" in made:
    run["calls"].append([dict(made, stage="init"), time.perf_counter() - start])
    return run
  env = made["ok"]
  msg = cut_observation(call(env, "reset", job["seed"]), max_obs_chars)
  run["calls"].append([msg, time.perf_counter() - start])
  if "err" in msg:
    return run
  actions = _actions(env, job, msg["ok"], run)
  for action in actions:
    start = time.perf_counter()
    msg = cut_observation(call(env, "step", action), max_obs_chars)
    run["actions"].append(action)
    run["calls"].append([msg, time.perf_counter() - start])
    if "err" in msg or not _continues(msg["ok"]):
      break
  return run


def _actions(env, job: dict, reset_result, run: dict) -> list:
  """The actions of the job: given, from the oracle (its reply recorded), or a probe's."""
  if job["kind"] == "oracle":
    return _oracle_actions(env, run)
  if job["kind"] != "probe":
    return job["actions"]
  try:
    first = str(reset_result[0])
  except BaseException:
    first = ""
  action = probe_action(job["policy"], first)
  return [] if action is None else [action] * job["steps"]


MAX_ORACLE_STEPS = 64


def _oracle_actions(env, run: dict) -> list:
  """oracle_actions() of a freshly reset instance; what it returned is noted in the run."""
  made = call(env, "oracle_actions")
  if "err" in made:
    run["oracle"] = made
    return []
  actions = made["ok"]
  run["oracle"] = {"type": type(actions).__name__}
  if not isinstance(actions, (list, tuple)):
    return []
  for action in actions[:MAX_ORACLE_STEPS]:
    if not _is_action(action):
      run["oracle"]["bad"] = _describe(action)
      return []
  return list(actions[:MAX_ORACLE_STEPS])


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
_EXAMPLE = (re.compile(r"`([^`\n]{1,80})`"), re.compile(r'"([^"\n]{1,80})"'),
            re.compile(r"(?:for example|for instance|e\.g\.|such as|example:)[:,]?\s*"
                       r"([^\n.;)]{1,80})", re.IGNORECASE),
            re.compile(r"'([^'\n]{1,80})'"))
_WORD = re.compile(r"[A-Za-z0-9_+-]+")
_GUESSES = ("yes no true false left right up down north south east west a b c d "
            "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z")


def example_action(observation: str) -> str | None:
  """The example action a first observation quotes: `...`, "...", 'for example ...'."""
  for pattern in _EXAMPLE:
    found = pattern.search(observation)
    if found and found.group(1).strip():
      return found.group(1).strip()
  return None


def stuffed_reply(observation: str, numbers: int = 101, max_chars: int = 8000) -> str:
  """One reply listing many candidate answers: small integers, the observation's words."""
  words = list(dict.fromkeys(_WORD.findall(observation)))
  text = " ".join([*map(str, range(numbers)), *words, _GUESSES])
  return text[:max_chars]


def probe_action(policy: str, first_observation: str) -> str | None:
  if policy == "empty":
    return ""
  if policy == "example":
    return example_action(first_observation)
  return stuffed_reply(first_observation)


def tool_calls(tools) -> list[dict]:
  """One call per declared tool, with arguments that match its parameter schema."""
  calls = []
  if not isinstance(tools, (list, tuple)):
    return calls
  for spec in tools:
    try:
      fn = spec["function"]
      calls.append({"name": fn["name"], "arguments": sample_value(fn.get("parameters", {}))})
    except BaseException:  # malformed specs are the host's to report
      continue
  return calls


def sample_value(schema, depth: int = 0):
  """A value that conforms to a schema of the function-spec subset (see schema.py)."""
  if not isinstance(schema, dict) or depth > 16:
    return "a"
  if isinstance(schema.get("enum"), list) and schema["enum"]:
    return schema["enum"][0]
  kind = schema.get("type", "string")
  kind = (kind[0] if kind else "string") if isinstance(kind, list) else kind
  if kind == "object":
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    return {name: sample_value(sub, depth + 1) for name, sub in properties.items()}
  if kind == "array":
    return [sample_value(schema["items"], depth + 1)] if "items" in schema else []
  return {"integer": 1, "number": 1.5, "boolean": True, "null": None}.get(kind, "a")


def _continues(result) -> bool:
  """False when a step result says the episode ended (or is malformed: the host judges)."""
  try:
    return not (result[2] or result[3])
  except BaseException:
    return False
