"""The validator: static checks on the host, then a judged trial run in the sandbox.

`static_check` never executes the source: syntax, size, imports against the allowlist,
a few names and dunder attributes that only escape attempts use, exactly one class with
`reset` and `step`. It is a first filter; isolation is the pool's job. `plan` builds the
trial the sandbox plays (every validation seed, then seed 0 again) and `judge` turns its
raw replies into a `ValidationResult`.

Reasons read "<rule>: [line N: ]<detail>", the detail naming the seed, step and action
where there are some. Rules: syntax, structure, allowed-imports, forbidden-names,
contract, runs, types, obs-length, time, return, deterministic, varied; the pool adds
"infra" for its own failures, which say nothing about the source.
"""

from __future__ import annotations

import ast
import random
import re

from spade_jax.sandbox import coerce, contract, episodes
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
# Actions for the trial steps: numbers, words and moves, and a mix with a tool call.
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


def plan(seed: int = 0) -> dict:
  """The trial: every validation seed is played through the same few action sequences."""
  rng = random.Random(seed)
  return {"seeds": list(contract.VALIDATION_SEEDS),
          "action_sets": [[rng.choice(pool) for _ in range(contract.VALIDATION_STEPS)]
                          for pool in ACTION_POOLS]}


def judge(msg: dict, class_name: str, trial: dict, reset_timeout_s: float,
          step_timeout_s: float, check_constant: bool = True) -> ValidationResult:
  """Judges the decoded reply of `runner.validation_run` for `trial`."""
  if "err" in msg:
    record = coerce.env_error(msg)
    return _fail(f"runs: loading or creating {class_name} failed: {record.error_detail}",
                 class_name=class_name)
  try:
    return _judge(msg["ok"], class_name, trial, reset_timeout_s, step_timeout_s, check_constant)
  except coerce.BadOutput as exc:
    return _fail(f"types: {exc}", class_name=class_name)
  except (KeyError, TypeError, ValueError, IndexError, AttributeError):
    return _fail("types: the trial reply is malformed", class_name=class_name)


def _judge(result: dict, class_name: str, trial: dict, reset_timeout_s: float,
           step_timeout_s: float, check_constant: bool) -> ValidationResult:
  env_max = coerce.max_turns(result["attrs"].get("max_turns"))
  coerce.tools(result["attrs"].get("tools"))
  runs = result["runs"]
  seeds, action_sets = trial["seeds"], trial["action_sets"]
  if len(runs) != len(seeds) * len(action_sets) + 1:
    problem = _judge_run(runs[-1], [], env_max, reset_timeout_s, step_timeout_s)[0]
    return _fail(problem or "runs: the trial ended early", class_name=class_name)
  seen = []
  for index, run in enumerate(runs):
    actions = action_sets[index // len(seeds)] if index < len(runs) - 1 else []
    problem, fingerprint = _judge_run(run, actions, env_max, reset_timeout_s, step_timeout_s)
    if problem:
      return _fail(problem, class_name=class_name)
    seen.append(fingerprint)
  if seen[-1][0] != seen[0][0]:
    return _fail(f"deterministic: reset(seed={seeds[0]}) gave two different first "
                 "observations", class_name=class_name)
  varied = any(len(set(seen[k * len(seeds):(k + 1) * len(seeds)])) >= contract.MIN_DISTINCT_EPISODES
               for k in range(len(action_sets)))
  if check_constant and not varied:
    return _fail(f"varied: seeds {seeds} all gave the same episode for the same actions "
                 "(a constant environment can be memorised)", class_name=class_name)
  return ValidationResult(True, class_name=class_name, max_turns=env_max)


def _judge_run(run: dict, actions: list, env_max: int | None, reset_timeout_s: float,
               step_timeout_s: float) -> tuple[str | None, tuple]:
  """(problem or None, fingerprint of the episode) for one seed's calls."""
  seed = run["seed"]
  fingerprint = []
  total = 0.0
  for i, (msg, seconds) in enumerate(run["calls"]):
    where = (f"reset(seed={seed})" if i == 0
             else f"step {i} (seed {seed}, action {actions[i - 1]!r})")
    limit = reset_timeout_s if i == 0 else step_timeout_s
    if not isinstance(msg, dict) or ("ok" in msg) == ("err" in msg):
      return f"types: {where} gave a malformed reply", ()
    if "err" in msg:
      return f"runs: {where} failed: {coerce.env_error(msg).error_detail}", ()
    try:
      record = (coerce.reset_result if i == 0 else coerce.step_result)(msg["ok"])
    except coerce.BadOutput as exc:
      return f"types: {where}: {exc}", ()
    if record.observation.endswith(coerce.CUT_MARK):
      return f"obs-length: {where} gave an observation over {contract.MAX_OBS_CHARS} chars", ()
    if not isinstance(seconds, (int, float)) or seconds > limit:
      return f"time: {where} took {seconds:.3g} s > {limit:g} s", ()
    total += record.reward
    fingerprint.append((record.observation, record.reward, record.terminated, record.truncated))
    if i > 0 and (record.done or (env_max is not None and i >= env_max)):
      if not -contract.RETURN_TOLERANCE <= total <= 1 + contract.RETURN_TOLERANCE:
        return f"return: episode return {total:g} for seed {seed} is outside [0, 1]", ()
      break
  return None, tuple(fingerprint)
