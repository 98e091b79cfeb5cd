"""The agent's reply parser: raw decoded model text -> what the environment receives.

One parser for both settings. Reasoning never counts: everything up to the last
`</think>` (and an unfinished `<think>` block) is dropped before extraction, as the Qwen3
chat template drops it when it re-renders the conversation. What is left is read as:

  tool use (the environment declares `tools`): Qwen3's own format, zero or more blocks
      <tool_call>
      {"name": "<tool>", "arguments": {...}}
      </tool_call>
    Each block is one `ReplyPart`, in order: a parsed call {"name", "arguments"} that the
    environment receives as a JSON object, or, for malformed JSON, a missing name, arguments
    that are not an object, an undeclared tool or an unclosed block, an error part whose
    text the agent gets back as that call's tool response (reward 0). Text around the
    blocks is not sent (the chat template keeps it as the assistant's content). A reply
    without a block is the agent's plain answer to the user: one text part with the
    visible text.
  games: the text inside the last match of the action format (e.g. `<action>{}</action>`)
    is one text part; a reply without one is an error part (`MISSING_ACTION`).

Parsing is linear in the reply's length (`tagged_blocks`): replies are model output of any
length, and a reply full of opening tags that never close must not stall the host.

Plain Python (no jax): the held-out tool-use evaluation parses model replies with it too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from spade_jax.sandbox.contract import MAX_ACTION_CHARS

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_FORMAT = ('<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
               '</tool_call>')
MISSING_ACTION = ("No action found in your reply. End your reply with exactly one action "
                  "written as {example}.")

Action = str | dict  # a game action or plain reply (str), or a tool call {"name", "arguments"}


@dataclasses.dataclass(frozen=True)
class ReplyPart:
  """One thing the reply asks for, in order.

  kind "call": `action` is {"name": str, "arguments": dict}; "text": `action` is the str a
  game or the user receives; "error": `action` is None and `error` is the observation that
  tells the agent what was wrong (the environment is not called).
  """

  kind: str
  action: Action | None = None
  error: str = ""


@dataclasses.dataclass(frozen=True)
class ParsedReply:
  visible: str  # the reply without its reasoning
  parts: tuple[ReplyPart, ...]

  @property
  def calls(self) -> list[dict]:
    return [p.action for p in self.parts if p.kind == "call"]

  @property
  def errors(self) -> list[str]:
    return [p.error for p in self.parts if p.kind == "error"]


def visible_text(text: str) -> str:
  """The reply after its reasoning: text after the last </think>, minus an unclosed <think>."""
  end = text.rfind(THINK_CLOSE)
  if end >= 0:
    text = text[end + len(THINK_CLOSE):]
  start = text.find(THINK_OPEN)
  if start >= 0:  # reasoning that never finished (the reply was cut)
    text = text[:start]
  return text.strip()


def check_action_format(action_format: str) -> None:
  if action_format.count("{}") != 1:
    raise ValueError(f"config.selfplay.action_format={action_format!r}: expected a string with "
                     "exactly one '{}' where the action goes, e.g. '<action>{}</action>'")


def action_format_example(action_format: str) -> str:
  """The format with a placeholder filled in, e.g. '<action>YOUR ACTION</action>'."""
  return action_format.replace("{}", "YOUR ACTION")


def format_action(action_format: str, action: str) -> str:
  """The reply that carries `action` in the action format (what `extract_action` reads)."""
  return action_format.replace("{}", action)


def tagged_blocks(text: str, open_tag: str, close_tag: str) -> tuple[list[str], int]:
  """Bodies of the `open_tag`...`close_tag` blocks of `text`, in order, and where the last
  one ends (0 if none).

  A block ends at the first `close_tag` after its `open_tag`, as with a non-greedy regex, but
  in one forward pass: once an `open_tag` has no `close_tag` after it, no later one has, so
  the scan stops there. A non-greedy regex instead scans to the end from every unclosed
  `open_tag`, which is quadratic in the reply's length.
  """
  bodies, end = [], 0
  while (start := text.find(open_tag, end)) >= 0:
    body_start = start + len(open_tag)
    stop = text.find(close_tag, body_start)
    if stop < 0:
      break
    bodies.append(text[body_start:stop])
    end = stop + len(close_tag)
  return bodies, end


def extract_action(text: str, action_format: str) -> str | None:
  """The stripped text inside the last match of `action_format`, None if there is none."""
  prefix, suffix = action_format.split("{}")
  if not prefix and not suffix:
    action = text.strip()
  elif not suffix:
    at = text.rfind(prefix)
    action = text[at + len(prefix):].strip() if at >= 0 else ""
  else:
    bodies, _ = tagged_blocks(text, prefix, suffix)
    action = bodies[-1].strip() if bodies else ""
  return action or None


def _error(number: int, problem: str) -> ReplyPart:
  return ReplyPart("error", error=f"Tool call {number} was not run: {problem}. Write each call "
                                  f"as\n{CALL_FORMAT}")


def parse_call(body: str, tool_names: Iterable[str] | None = None) -> dict | str:
  """{"name", "arguments"} from the text of one <tool_call> block, or what is wrong with it.

  `arguments` may be given as a JSON string of an object (some chat formats do); it is
  decoded. A missing `arguments` means no arguments. `tool_names` None accepts any name.
  """
  try:
    call = json.loads(body)
  except (ValueError, RecursionError) as exc:
    return f"its JSON is malformed ({str(exc)[:120]})"
  if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
    return 'it is not a JSON object with a "name" string'
  arguments = call.get("arguments", {})
  if isinstance(arguments, str):
    try:
      arguments = json.loads(arguments)
    except (ValueError, RecursionError):
      return '"arguments" is a string that is not JSON'
  if not isinstance(arguments, dict):
    return f'"arguments" must be a JSON object, got {type(arguments).__name__}'
  names = None if tool_names is None else sorted(tool_names)
  if names is not None and call["name"] not in names:
    return f"there is no tool named {call['name']!r}; the tools are {', '.join(names)}"
  parsed = {"name": call["name"], "arguments": arguments}
  if len(json.dumps(parsed)) > MAX_ACTION_CHARS:
    return f"the call is longer than {MAX_ACTION_CHARS} characters of JSON"
  return parsed


def tool_names(tools: Iterable[Any]) -> list[str]:
  """The declared names of OpenAI function-calling specs."""
  return [t["function"]["name"] for t in tools]


def parse_tool_reply(text: str, tools: Iterable[Any] | None) -> ParsedReply:
  """Qwen3 tool-call parsing (module docstring); `tools` None accepts any tool name."""
  visible = visible_text(text)
  names = None if tools is None else tool_names(tools)
  bodies, end = tagged_blocks(visible, CALL_OPEN, CALL_CLOSE)
  parts = []
  for number, body in enumerate(bodies, start=1):
    parsed = parse_call(body.strip(), names)
    parts.append(ReplyPart("call", parsed) if isinstance(parsed, dict) else _error(number, parsed))
  if visible.find(CALL_OPEN, end) >= 0:
    parts.append(_error(len(bodies) + 1, f"the block is never closed with {CALL_CLOSE}"))
  if not parts:
    parts.append(ReplyPart("text", visible))
  return ParsedReply(visible, tuple(parts))


def parse_game_reply(text: str, action_format: str) -> ParsedReply:
  """The last `action_format` match of the visible text, or the MISSING_ACTION error."""
  visible = visible_text(text)
  action = extract_action(visible, action_format)
  if action is None:
    example = action_format_example(action_format)
    return ParsedReply(visible, (ReplyPart("error", error=MISSING_ACTION.format(example=example)),))
  return ParsedReply(visible, (ReplyPart("text", action),))


def parse_reply(text: str, *, tools: Iterable[Any] | None = None,
                action_format: str = "<action>{}</action>") -> ParsedReply:
  """What the environment receives: tool calls when it declares `tools`, else a game action."""
  if tools is not None:
    return parse_tool_reply(text, tools)
  return parse_game_reply(text, action_format)
