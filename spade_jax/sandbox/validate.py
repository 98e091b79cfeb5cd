"""The validator: static checks on the host, then a judged trial run in the sandbox.

`static_check` never executes the source: syntax, size, imports against the allowlist,
a few names and dunder attributes that only escape attempts use, exactly one class with
`reset` and `step`. It is a first filter; isolation is the pool's job. `build_trial` builds the
trial the sandbox plays (every validation seed, then seed 0 again) and `judge` turns its
raw replies into a `ValidationResult`.

Reasons read "<rule>: [line N: ]<detail>", the detail naming the seed, step and action
where there are some. Rules: syntax, structure, allowed-imports, forbidden-names,
contract, runs, types, obs-length, time, return, deterministic (whole episodes replayed on
a fresh instance), varied, and the guards of guards.py (tools, tool-calls, tools-ignored,
oracle, hackable, instructions); the pool adds "infra" for its own failures, which say
nothing about the source.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import re

from spade_jax.sandbox import coerce, contract, episodes, guards
from spade_jax.sandbox.api import ValidationResult

FORBIDDEN_NAMES = frozenset({
    "__import__", "breakpoint", "compile", "eval", "exec", "globals", "input", "locals",
    "open", "vars",
})
FORBIDDEN_ATTRS = frozenset({
    "__base__", "__bases__", "__builtins__", "__closure__", "__code__", "__dict__",
    "__getattribute__", "__globals__", "__loader__", "__mro__", "__spec__", "__subclasses__",
    "f_back", "f_globals", "f_locals", "gi_frame", "tb_frame",
})
# Actions for the trial steps: numbers, words and moves, and odd strings (JSON-looking text
# included: in a tool-use environment it is a plain reply, calls arrive as dicts).
ACTION_POOLS = (
    ("0", "1", "2", "3", "5", "7", "10", "12", "15", "20", "50", "100", "-1"),
    ("yes", "no", "a", "b", "north", "south", "left", "right", "up", "down", "A1", "B2"),
    ("", "?", "1 2", "hello world", "[1, 2, 3]", '{"name": "noop", "arguments": {}}',
     '{"name": "search", "arguments": {"query": "a"}}', "x" * 100, "(1+2)*3", "ABC"),
)

def _fail(reason: str, line: int | None = None, class_name: str | None = None) -> ValidationResult:
  """reason is "<rule>: <detail>"; the line, when known, goes between the two."""
  if line is not None:
    rule, _, detail = reason.partition(": ")
    reason = f"{rule}: line {line}: {detail}"
  return ValidationResult(False, reason=reason, line=line, class_name=class_name)


def _has_param(fn: ast.FunctionDef, position: int, name: str | None = None) -> bool:
  args = fn.args
  positional = [*args.posonlyargs, *args.args]
  if len(positional) > position or args.vararg is not None:
    return True
  return name is not None and (any(a.arg == name for a in args.kwonlyargs) or bool(args.kwarg))


def static_check(source: str) -> ValidationResult:
  """Checks that need no execution; valid=True means the source may go to the sandbox."""
  class_name, why = episodes.find_class(source)
  if class_name is None and not why.startswith(episodes.CLASS_COUNT):
    found = re.search(r"\(line (\d+)\)$", why)
    line = int(found.group(1)) if found else None
    rule = "syntax" if why.startswith(("SyntaxError", "source cannot")) else "structure"
    return _fail(f"{rule}: {why}", line)
  tree = ast.parse(source)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      names = [("." * node.level) + (node.module or "")]
    else:
      names = []
    for name in names:
      if name.split(".")[0] not in contract.ALLOWED_IMPORTS:
        return _fail(f"allowed-imports: import of {name!r} is not allowed", node.lineno)
    if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
      return _fail(f"forbidden-names: {node.id!r} is not allowed", node.lineno)
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
      return _fail(f"forbidden-names: attribute {node.attr!r} is not allowed", node.lineno)
  if class_name is None:
    return _fail(f"structure: {why}")
  cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
  methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
  for name, position, param in (("reset", 1, "seed"), ("step", 1, None)):
    fn = methods.get(name)
    if fn is None:
      return _fail(f"contract: class {cls.name} has no method {name}", cls.lineno, cls.name)
    if isinstance(fn, ast.AsyncFunctionDef):
      return _fail(f"contract: {name} must not be async", fn.lineno, cls.name)
    if not _has_param(fn, position, param):
      return _fail(f"contract: {name} must take (self, {param or 'action'})", fn.lineno,
                   cls.name)
  return ValidationResult(True, class_name=cls.name)


@dataclasses.dataclass(frozen=True)
class Rules:
  """What the judge requires beyond the contract's basics (the pool's configuration)."""

  reset_timeout_s: float = contract.DEFAULT_RESET_TIMEOUT_S
  step_timeout_s: float = contract.DEFAULT_STEP_TIMEOUT_S
  check_constant: bool = True  # reject environments whose seeds all give the same episode
  require_tools: bool = False  # the tool-use setting: `tools` must be declared
  require_oracle: bool = False  # oracle_actions() must be defined (and it is always played)


def build_trial(seed: int = 0) -> dict:
  """The trial: action sets on every validation seed, then the guards' episodes (runner.py)."""
  rng = random.Random(seed)
  return {"seeds": list(contract.VALIDATION_SEEDS),
          "action_sets": [[rng.choice(pool) for _ in range(contract.VALIDATION_STEPS)]
                          for pool in ACTION_POOLS],
          "probe_seeds": list(contract.PROBE_SEEDS), "probes": list(guards.PROBES),
          "probe_steps": contract.PROBE_STEPS, "plain_reply": guards.PLAIN_REPLY}


def judge(msg: dict, class_name: str, trial: dict, rules: Rules) -> ValidationResult:
  """Judges the decoded reply of `runner.validation_run` for `trial`."""
  if "err" in msg:
    record = coerce.env_error(msg)
    return _fail(f"runs: loading or creating {class_name} failed: {record.error_detail}",
                 class_name=class_name)
  try:
    problem, env_max = _judge(msg["ok"], trial, rules)
  except coerce.BadOutput as exc:
    problem, env_max = f"types: {exc}", None
  except Exception as exc:  # whatever the reply holds, this source's verdict is "invalid"
    problem, env_max = f"types: the trial reply is malformed ({type(exc).__name__})", None
  if problem:
    return _fail(problem, class_name=class_name)
  return ValidationResult(True, class_name=class_name, max_turns=env_max,
                          difficulty_levels=msg["ok"]["attrs"].get("difficulty_levels"))


def _judge(result: dict, trial: dict, rules: Rules) -> tuple[str | None, int | None]:
  """(the first broken rule's reason or None, the environment's max_turns)."""
  attrs = result["attrs"]
  env_max = coerce.max_turns(attrs.get("max_turns"))
  coerce.difficulty_levels(attrs.get("difficulty_levels"))
  problem = guards.tools_problem(attrs.get("tools"), rules.require_tools)
  if problem:
    return problem, env_max
  runs = [guards.Run.of(raw) for raw in result["runs"]]
  for run in runs:
    run.problem, run.fingerprint, run.total = _judge_run(run, env_max, rules)
    if run.problem:
      return run.problem, env_max
  expected = len(trial["seeds"]) * len(trial["action_sets"])
  trials = [r for r in runs if r.kind == "trial"]
  if len(trials) != expected:
    return "runs: the trial ended early", env_max
  problem = (_determinism_problem(trials, [r for r in runs if r.kind == "replay"])
             or _variety_problem(trials, trial, rules.check_constant)
             or guards.tool_calls_problem(runs, attrs.get("tools"))
             or guards.probe_problem(runs)
             or guards.oracle_problem(runs, bool(result.get("has_oracle")),
                                      rules.require_oracle)
             or guards.instructions_problem(runs, attrs.get("tools"), env_max))
  return problem, env_max


def _determinism_problem(trials: list, replays: list) -> str | None:
  for replay in replays:
    first = next(r for r in trials if r.set == replay.set and r.seed == replay.seed)
    for i, (a, b) in enumerate(zip(first.fingerprint, replay.fingerprint, strict=False)):
      if a != b:
        what = "first observation" if i == 0 else f"step {i} (observation or reward)"
        return (f"deterministic: seed {replay.seed} replayed with the actions "
                f"{replay.actions[:i]!r} on a fresh instance gave a different {what}")[:400]
    if len(first.fingerprint) != len(replay.fingerprint):
      return (f"deterministic: seed {replay.seed} replayed on a fresh instance ended after "
              f"{len(replay.fingerprint) - 1} steps, not {len(first.fingerprint) - 1}")
  return None


def _variety_problem(trials: list, trial: dict, check_constant: bool) -> str | None:
  n = len(trial["seeds"])
  varied = any(len({r.fingerprint for r in trials[k * n:(k + 1) * n]})
               >= contract.MIN_DISTINCT_EPISODES for k in range(len(trial["action_sets"])))
  if check_constant and not varied:
    return (f"varied: seeds {trial['seeds']} all gave the same episode for the same actions "
            "(a constant environment can be memorised)")
  return None


def _judge_run(run: guards.Run, env_max: int | None, rules: Rules
               ) -> tuple[str | None, tuple, float]:
  """(problem or None, fingerprint of the episode, its return) for one run's calls."""
  fingerprint = []
  total = 0.0
  for i, (msg, seconds) in enumerate(run.calls):
    where = run.where(i)
    limit = rules.reset_timeout_s if i == 0 else rules.step_timeout_s
    if not isinstance(msg, dict) or ("ok" in msg) == ("err" in msg):
      return f"types: {where} gave a malformed reply", (), total
    if "err" in msg:
      rule = "tool-calls" if run.kind == "tool" and i > 0 else "runs"
      return f"{rule}: {where} failed: {coerce.env_error(msg).error_detail}", (), total
    try:
      record = (coerce.reset_result if i == 0 else coerce.step_result)(msg["ok"])
    except coerce.BadOutput as exc:
      return f"types: {where}: {exc}", (), total
    if record.observation.endswith(coerce.CUT_MARK):
      return (f"obs-length: {where} gave an observation over {contract.MAX_OBS_CHARS} chars",
              (), total)
    if not isinstance(seconds, (int, float)) or seconds > limit:
      return f"time: {where} took {seconds:.3g} s > {limit:g} s", (), total
    total += record.reward
    fingerprint.append((record.observation, record.reward, record.terminated, record.truncated))
    try:
      coerce.check_return(total, i)
    except coerce.BadOutput:
      return f"return: the episode return {total:g} after {where} is outside [0, 1]", (), total
    if i > 0 and (record.done or (env_max is not None and i >= env_max)):
      break
  return None, tuple(fingerprint), total
