"""Validator guards against broken and hackable environments, judged on the trial's runs.

Each guard is a named rule (the reason reads "<rule>: <detail>"):
  tools          tool specs are OpenAI function specs whose parameters are schemas of the
                 subset in schema.py; in the tool-use setting `tools` must be declared.
  tool-calls     every declared tool, called with arguments that match its schema (made up
                 by schema.sample_value), gets a result without crashing.
  tools-ignored  a tool call must not be answered exactly like a plain text reply.
  oracle         oracle_actions(), when defined (or required), returns a list of actions
                 (strs or tool-call dicts) that, sent back through the wire as an agent's
                 reply would be, reaches ORACLE_MIN_RETURN on every probe seed.
  hackable       no degenerate policy (probes.py) earns a mean return of
                 DEGENERATE_MAX_RETURN.
  instructions   a tool-use environment's oracle episodes each pose MIN_INSTRUCTIONS or more
                 different user instructions (observation lines starting INSTRUCTION_PREFIX)
                 before their last step: a sequence of requests, not a single one.
`validate.judge` runs them after the basic rules, on the runs trial.py played.
"""

from __future__ import annotations

import json
import statistics

from spade_jax.sandbox import coerce, contract, probes, schema
from spade_jax.sandbox.trial import PLAIN_REPLY, Run


def tools_problem(tools, required: bool) -> str | None:
  if tools is None:
    return ("tools: a tool-use environment must declare `tools` (OpenAI function specs)"
            if required else None)
  try:
    coerce.tools(tools)
  except coerce.BadOutput as exc:
    return f"tools: {exc}"
  return None


def tool_calls_problem(runs: list[Run], tools) -> str | None:
  if not tools:
    return None
  params = {spec["function"]["name"]: spec["function"].get("parameters", {"type": "object"})
            for spec in tools}
  tool_runs = [r for r in runs if r.kind == "tool" and r.actions]
  missing = sorted(set(params) - {r.actions[0]["name"] for r in tool_runs})
  if missing:
    return f"tool-calls: the trial could not call {missing}"
  for run in tool_runs:
    call = run.actions[0]
    problem = schema.validate(call["arguments"], params[call["name"]])
    if problem:  # the trial's own arguments must match, or the check proves nothing
      return f"tool-calls: the trial's call {json.dumps(call)[:120]} breaks its schema: {problem}"
  plain = {r.seed: r.fingerprint[1][:2] for r in runs
           if r.kind == "plain" and len(r.fingerprint) > 1}
  for name in params:
    answers = [r for r in tool_runs if r.actions[0]["name"] == name]
    if answers and all(len(r.fingerprint) > 1 and r.fingerprint[1][:2] == plain.get(r.seed)
                       for r in answers):
      return (f"tools-ignored: a schema-valid call of {name!r} got the same observation and "
              f"reward as the plain reply {PLAIN_REPLY!r}; answer tool calls with tool results")
  return None


def oracle_problem(runs: list[Run], has_oracle: bool, required: bool) -> str | None:
  if not has_oracle:
    return ("oracle: this run requires oracle_actions(), the actions that solve the current "
            "instance" if required else None)
  for run in (r for r in runs if r.kind == "oracle"):
    answer = run.oracle
    if answer.error_kind == "infra":
      return f"infra: {answer.error_detail}"
    if answer.error_kind == "bad_output":
      return f"oracle: {answer.error_detail}"
    if answer.error_kind is not None:
      return (f"oracle: oracle_actions() after reset(seed={run.seed}) failed: "
              f"{answer.error_detail}")
    if run.total < contract.ORACLE_MIN_RETURN:
      return (f"oracle: oracle_actions() reached a return of {run.total:.3g} < "
              f"{contract.ORACLE_MIN_RETURN:g} on seed {run.seed}")
  return None


def probe_problem(runs: list[Run]) -> str | None:
  for policy in probes.PROBES:
    played = [r for r in runs if r.kind == "probe" and r.policy == policy]
    mean = statistics.fmean([r.total for r in played]) if played else 0.0
    if mean >= contract.DEGENERATE_MAX_RETURN:
      action = json.dumps(played[0].actions[0])[:60] if played[0].actions else ""
      return (f"hackable: the {probes.NAMES[policy]} probe (action {action}) earned a mean "
              f"return of {mean:.3g} >= {contract.DEGENERATE_MAX_RETURN:g} over seeds "
              f"{[r.seed for r in played]}")
  return None


def posed_instructions(run: Run) -> list[str]:
  """The different user instructions a run's observations posed while the episode went on.

  An instruction is an observation line that starts with contract.INSTRUCTION_PREFIX; the
  observation of the step that ends the episode poses nothing (nothing is left to do).
  """
  lines = []
  for i, (observation, _, terminated, truncated) in enumerate(run.fingerprint):
    if i > 0 and (terminated or truncated):
      break
    lines += [line.strip() for line in observation.splitlines()]
  prefix = contract.INSTRUCTION_PREFIX
  texts = [line[len(prefix):].strip() for line in lines if line.startswith(prefix)]
  return list(dict.fromkeys(text for text in texts if text))


def instructions_problem(runs: list[Run], tools) -> str | None:
  if not tools:
    return None
  for run in (r for r in runs if r.kind == "oracle"):
    posed = posed_instructions(run)
    if len(posed) < contract.MIN_INSTRUCTIONS:
      shown = "; ".join(repr(p[:60]) for p in posed) or "none"
      return (f"instructions: the oracle_actions() episode of seed {run.seed} posed "
              f"{len(posed)} user instruction(s) ({shown}) before its last step; a tool-use "
              f"environment poses a sequence of at least {contract.MIN_INSTRUCTIONS}, each on "
              f"an observation line starting with {contract.INSTRUCTION_PREFIX!r}, the next "
              "once the previous one is done")
  return None
