"""The validator: static checks on the host, then a trial played through the pool and judged.

`static_check` never executes the source: syntax, size, imports against the allowlist,
a few names and dunder attributes that only escape attempts use, exactly one class with
`reset` and `step`. It is a first filter; isolation is the pool's job. `validate_sources`
then plays the trial of trial.py through the pool's own episode calls, as real episodes are
played, and judges each source on the host from the records it got back: nothing that
runs next to an environment writes its verdict.

Reasons read "<rule>: [line N: ]<detail>", the detail naming the seed, step and action
where there are some. Rules: syntax, structure, allowed-imports, forbidden-names,
contract, runs, types, obs-length, time, return, deterministic (whole episodes replayed in
another process), varied, and the guards of guards.py (tools, tool-calls, tools-ignored,
oracle, hackable, instructions); "infra" marks the pool's own failures, which say nothing
about the source.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Sequence

from spade_jax.sandbox import coerce, contract, episodes, guards, pyparse, trial
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
  tree = pyparse.parse(source)
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


def defines_oracle(source: str) -> bool:
  """Whether the source's class defines oracle_actions (a source static_check accepted)."""
  cls = next(n for n in pyparse.parse(source).body if isinstance(n, ast.ClassDef))
  for node in cls.body:
    if isinstance(node, ast.FunctionDef) and node.name == "oracle_actions":
      return True
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "oracle_actions" for t in node.targets):
      return True
  return False


def validate_sources(pool: trial.EpisodePool, sources: Sequence[str], rules: Rules,
                     seed: int | None = None) -> list[ValidationResult]:
  """Validates every source: the static check, then the trial played through `pool`.

  seed: None draws the trial's seeds and actions afresh from the operating system's entropy
  (what training uses); an int makes them reproducible (tests).
  """
  results = [static_check(s) for s in sources]
  draw = trial.Draw.of(seed)
  ready = [i for i, r in enumerate(results) if r.valid]
  oracles = {i: defines_oracle(sources[i]) for i in ready}
  runs = {i: [trial.opening(i, draw)] for i in ready}
  trial.play(pool, sources, [runs[i][0] for i in ready])
  for i in ready:
    first = runs[i][0]
    if all(record.error_kind is None for record in first.records):
      runs[i] = trial.plan(first, draw, oracles[i], first.records[0].info.get("tools"))
  trial.play(pool, sources, [run for i in ready for run in runs[i][1:]])
  for i in ready:
    results[i] = judge(runs[i], results[i].class_name, rules, oracles[i])
  return results


def judge(runs: list[trial.Run], class_name: str, rules: Rules, has_oracle: bool
          ) -> ValidationResult:
  """The verdict on one source from the records of its runs."""
  for run in runs:
    run.problem, run.fingerprint, run.total = _judge_run(run, rules)
    if run.problem:
      return _fail(run.problem, class_name=class_name)
  first = runs[0].records[0]
  trials = [r for r in runs if r.kind == "trial"]
  problem = (guards.tools_problem(first.info.get("tools"), rules.require_tools)
             or _determinism_problem(trials, [r for r in runs if r.kind == "replay"])
             or _variety_problem(runs, rules.check_constant)
             or guards.tool_calls_problem(runs, first.info.get("tools"))
             or guards.probe_problem(runs)
             or guards.oracle_problem(runs, has_oracle, rules.require_oracle)
             or guards.instructions_problem(runs, first.info.get("tools")))
  if problem:
    return _fail(problem, class_name=class_name)
  return ValidationResult(True, class_name=class_name, max_turns=first.info["max_turns"],
                          difficulty_levels=first.info.get("difficulty_levels"))


def _determinism_problem(trials: list[trial.Run], replays: list[trial.Run]) -> str | None:
  for replay in replays:
    first = next(r for r in trials if r.set == replay.set and r.seed == replay.seed)
    for i, (a, b) in enumerate(zip(first.fingerprint, replay.fingerprint, strict=False)):
      if a != b:
        what = "first observation" if i == 0 else f"step {i} (observation or reward)"
        return (f"deterministic: seed {replay.seed} replayed with the actions "
                f"{replay.actions[:i]!r} in another process gave a different {what}")[:400]
    if len(first.fingerprint) != len(replay.fingerprint):
      return (f"deterministic: seed {replay.seed} replayed in another process ended after "
              f"{len(replay.fingerprint) - 1} steps, not {len(first.fingerprint) - 1}")
  return None


def _variety_problem(runs: list[trial.Run], check_constant: bool) -> str | None:
  """Unless the same actions (an action set's, a probe's) gave different episodes on different
  seeds, or the oracle solved them differently, the environment looks constant: a hint
  could memorise it. The oracle's episodes count with their actions, as random actions may
  never reveal a hidden state that differs."""
  groups: dict[tuple, set] = {}
  for run in runs:
    if run.kind in ("trial", "oracle", "probe"):
      solution = json.dumps(run.actions) if run.kind == "oracle" else ""
      groups.setdefault((run.kind, run.set, run.policy), set()).add((run.fingerprint, solution))
  if check_constant and all(len(f) < contract.MIN_DISTINCT_EPISODES for f in groups.values()):
    seeds = sorted({run.seed for run in runs if run.kind in ("trial", "oracle", "probe")})
    return (f"varied: seeds {seeds} all gave the same episode for the same actions "
            "(a constant environment can be memorised)")
  return None


# The start of a reset's bad_output detail that is about a class attribute -> its rule: the
# attributes are the same on every seed, so the reason names no call.
_ATTRIBUTE_RULES = {"tools": "tools", "max_turns": "types", "difficulty_levels": "types"}


def _judge_run(run: trial.Run, rules: Rules) -> tuple[str | None, tuple, float]:
  """(problem or None, fingerprint of the episode, its return) from the run's records."""
  fingerprint = []
  total = 0.0
  for i, record in enumerate(run.records):
    if record.error_kind is not None:
      return _error_problem(run, i, rules), (), total
    if record.observation.endswith(coerce.CUT_MARK):
      return (f"obs-length: {run.where(i)} gave an observation over {contract.MAX_OBS_CHARS} "
              "chars", (), total)
    total += record.reward
    fingerprint.append((record.observation, record.reward, record.terminated, record.truncated))
  return None, tuple(fingerprint), total


def _error_problem(run: trial.Run, i: int, rules: Rules) -> str:
  """The reason for the error record of call i of the run."""
  record, where = run.records[i], run.where(i)
  kind, detail = record.error_kind, record.error_detail
  if kind == "infra":
    return f"infra: {detail}"
  if kind == "timeout":
    limit = rules.reset_timeout_s if i == 0 else rules.step_timeout_s
    return f"time: {where} hit its timeout of {limit:g} s"
  if kind == "bad_output":
    attribute = next((a for a in _ATTRIBUTE_RULES if i == 0 and detail.startswith(a)), None)
    if attribute:
      return f"{_ATTRIBUTE_RULES[attribute]}: {detail}"
    if detail.startswith(contract.RETURN_RANGE_ERROR):
      return f"return: {detail.removeprefix(contract.RETURN_RANGE_ERROR + ': ')} ({where})"
    return f"types: {where}: {detail}"
  rule = "tool-calls" if run.kind == "tool" and i > 0 else "runs"
  return f"{rule}: {where} {'crashed' if kind == 'crash' else 'failed'}: {detail}"
