"""The agent plays BFCL multi-turn cases through the engine, as BFCL's function-calling
harness does, and returns BFCL's decoded result per case.

Per case: the tools are the function docs of its involved classes (less its
`excluded_function`s; in miss_func, the `missed_function`s of a later turn are withheld
until that turn, which then says DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC), in OpenAI
form (BFCL's `convert_to_tool` for open models, restated: its module needs tree_sitter).
Each user turn: the model replies; the reply is parsed with the project's reply parser
(`selfplay.replies.parse_tool_reply`, Qwen3 `<tool_call>` blocks); its calls become call
strings `name(k=repr(v), ...)` (BFCL's `convert_to_function_call`), run on the case's
backend instances (BFCL's own `execute_multi_turn_func_call`, state kept across turns) and
their results come back as tool messages; a reply without a call ends the turn. More than
BFCL's MAXIMUM_STEP_LIMIT steps in a turn, a full cache or a prompt that does not fit ends
the case early (BFCL scores that as force-terminated). Only plain literal calls of backend
methods run (`bfcl_data.is_plain_call`); the call strings are built from parsed JSON anyway.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import sys

from bfcl_eval.constants.default_prompts import (
  DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
  MAXIMUM_STEP_LIMIT,
)
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from tqdm import tqdm

from spade_jax.engine.api import Request
from spade_jax.eval.suites import bfcl_data
from spade_jax.selfplay.replies import parse_tool_reply

_PLAY_IDS = itertools.count()


def _openai_type(schema: dict) -> dict:
  schema = dict(schema)
  schema["type"] = GORILLA_TO_OPENAPI.get(schema.get("type", "string"), "string")
  if "properties" in schema:
    schema["properties"] = {k: _openai_type(v) for k, v in schema["properties"].items()}
  if isinstance(schema.get("items"), dict):
    schema["items"] = _openai_type(schema["items"])
  return schema


def to_tool(doc: dict) -> dict:
  """A BFCL function doc as an OpenAI function-calling spec."""
  params = copy.deepcopy(doc["parameters"])
  params = dict(_openai_type(params), type="object")
  return {"type": "function", "function": {"name": doc["name"].replace(".", "_"),
                                           "description": doc["description"],
                                           "parameters": params}}


def call_string(call: dict) -> str:
  """{"name", "arguments"} -> "name(k=repr(v),...)", BFCL's convert_to_function_call."""
  return f"{call['name']}({','.join(f'{k}={v!r}' for k, v in call['arguments'].items())})"


def case_tools(case: dict, turn: int) -> list[dict]:
  """The tools the model sees at `turn`: docs of the involved classes, less excluded and
  not-yet-released (miss_func) functions."""
  withheld = {name for at, names in case.get("missed_function", {}).items()
              if int(at) > turn for name in names}
  excluded = set(case.get("excluded_function", ())) | withheld
  return [to_tool(d) for cls in case["involved_classes"] for d in bfcl_data.function_docs(cls)
          if d["name"] not in excluded]


@dataclasses.dataclass
class _Game:
  case: dict
  cid: tuple
  model_name: str
  turn: int = 0
  steps: int = 0
  tools: list = dataclasses.field(default_factory=list)
  messages: list = dataclasses.field(default_factory=list)
  result: list = dataclasses.field(default_factory=list)
  reply_tokens: list = dataclasses.field(default_factory=list)


class Player:
  """Plays many cases at once on the generator's engine (continuous batching)."""

  def __init__(self, generator):
    self.g = generator
    self.live: dict[tuple, _Game] = {}
    self._submits = 0

  def _submit(self, game: _Game, ids: list[int]) -> None:
    self._submits += 1
    params = dataclasses.replace(self.g.params, seed=self.g.params.seed + 7919 * self._submits)
    self.g.engine.submit(Request(game.cid, ids, params))

  def _open_turn(self, game: _Game, fresh: bool) -> None:
    """Adds the turn's user messages; re-renders the whole chat when the tools changed."""
    case = game.case
    tools = case_tools(case, game.turn)
    new = list(case["question"][game.turn])
    if str(game.turn) in case.get("missed_function", {}):
      new = new or [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
    game.result.append([])
    game.messages.extend(new)
    if fresh or tools != game.tools:
      game.tools = tools
      if not fresh:
        self.g.engine.release(game.cid)
      ids = self.g.formatter.prompt_ids(game.messages, tools=tools)
      if not self.g.fits(ids):
        return self._end(game, started=False)
    else:
      ids = self.g.formatter.turn_ids(new, game.reply_tokens)
    self._submit(game, ids)

  def _end(self, game: _Game, started: bool = True) -> None:
    self.live.pop(game.cid, None)
    if started:
      self.g.engine.release(game.cid)
    for key in [k for k in vars(multi_turn_utils) if k.startswith(game.model_name)]:
      del vars(multi_turn_utils)[key]

  def _execute(self, game: _Game, calls: list[str]) -> list[str]:
    case = game.case
    names = bfcl_data.case_methods(case)
    safe = [bfcl_data.safe_call(c, names) for c in calls]
    results, _ = multi_turn_utils.execute_multi_turn_func_call(
        safe, case["initial_config"], case["involved_classes"], game.model_name, case["id"],
        long_context="long_context" in case["id"])
    return [str(r) for r in results]

  def _on_reply(self, game: _Game, comp) -> None:
    text = self.g.decode_reply(comp.tokens, comp.finish_reason)
    game.reply_tokens = list(comp.tokens)
    game.messages.append({"role": "assistant", "content": text})
    if comp.finish_reason == "cache_full":
      return self._end(game)
    parsed = parse_tool_reply(text, game.tools)
    if not parsed.calls and not parsed.errors:  # a plain answer: the turn is over
      game.turn, game.steps = game.turn + 1, 0
      if game.turn == len(game.case["question"]):
        return self._end(game)
      return self._open_turn(game, fresh=False)
    calls = [call_string(c) for c in parsed.calls]
    game.result[-1].append(calls)
    new = [{"role": "tool", "content": r} for r in self._execute(game, calls)]
    new += [{"role": "tool", "content": e} for e in parsed.errors]
    game.steps += 1
    if game.steps >= MAXIMUM_STEP_LIMIT:
      return self._end(game)
    game.messages.extend(new)
    self._submit(game, self.g.formatter.turn_ids(new, game.reply_tokens))

  def play(self, cases: list[dict], samples: int) -> list[list[list]]:
    """Each case's `samples` decoded results (turn -> step -> call strings)."""
    play_id = next(_PLAY_IDS)
    games = [[_Game(case, ("bfcl", play_id, i, j), f"spade_play_{play_id}_{i}_{j}")
              for j in range(samples)] for i, case in enumerate(cases)]
    for game in (g for row in games for g in row):
      self.live[game.cid] = game
      self._open_turn(game, fresh=True)
    total = len(self.live)
    with tqdm(total=total, disable=not self.g.progress, file=sys.stderr, desc="bfcl cases",
              leave=False) as bar:
      while self.live:
        if not self.g.engine.pending():
          raise RuntimeError(f"{len(self.live)} BFCL cases wait for a turn the engine lacks")
        for comp in self.g.engine.poll():
          self._on_reply(self.live[comp.conversation_id], comp)
        bar.update(total - len(self.live) - bar.n)
    return [[g.result for g in row] for row in games]
