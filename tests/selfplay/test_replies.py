"""The reply parser on hand-written Qwen3-format replies (thinking, several calls, errors)."""

import json
import pathlib
import subprocess
import sys
import time

import pytest

from spade_jax.selfplay.designer import parse_designer_output
from spade_jax.selfplay.replies import (
  CALL_FORMAT,
  MISSING_ACTION,
  extract_action,
  parse_call,
  parse_reply,
  visible_text,
)
from spade_jax.tokenizer import load_tokenizer

TOOLS = [{"type": "function", "function": {"name": n, "description": "d",
                                           "parameters": {"type": "object", "properties": {}}}}
         for n in ("list_accounts", "transfer")]

TWO_CALLS = """<think>
The user wants a transfer. I could call
<tool_call>
{"name": "transfer", "arguments": {"amount_cents": 1}}
</tool_call>
but first I need the ids.
</think>

I will look the accounts up first.
<tool_call>
{"name": "list_accounts", "arguments": {}}
</tool_call>
<tool_call>
{"name": "transfer", "arguments": {"from_account_id": "A", "to_account_id": "B",
 "amount_cents": 500}}
</tool_call>"""


def test_two_calls_in_one_reply_come_out_in_order_and_thinking_does_not_count():
  parsed = parse_reply(TWO_CALLS, tools=TOOLS)
  assert [p.kind for p in parsed.parts] == ["call", "call"]
  assert parsed.calls == [
      {"name": "list_accounts", "arguments": {}},
      {"name": "transfer", "arguments": {"from_account_id": "A", "to_account_id": "B",
                                         "amount_cents": 500}}]
  assert "<think>" not in parsed.visible and "first I need" not in parsed.visible


def test_a_call_written_only_inside_the_thinking_is_a_plain_reply():
  text = ('<think>\nMaybe <tool_call>\n{"name": "list_accounts", "arguments": {}}\n'
          "</tool_call>\n</think>\n\nYour balance is $12.00.")
  parsed = parse_reply(text, tools=TOOLS)
  assert [(p.kind, p.action) for p in parsed.parts] == [("text", "Your balance is $12.00.")]


def test_malformed_json_and_unknown_tool_become_error_parts_naming_the_problem():
  text = ('<tool_call>\n{"name": "list_accounts", "arguments": {}\n</tool_call>\n'
          '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>\n'
          '<tool_call>\n{"name": "list_accounts", "arguments": {}}\n</tool_call>\n'
          '<tool_call>\n{"name": "transfer", "arguments": ')
  parsed = parse_reply(text, tools=TOOLS)
  assert [p.kind for p in parsed.parts] == ["error", "error", "call", "error"]
  first, second, fourth = parsed.errors
  assert first.startswith("Tool call 1 was not run: its JSON is malformed")
  assert "no tool named 'delete_everything'" in second and "list_accounts, transfer" in second
  assert "Tool call 4" in fourth and "never closed" in fourth
  assert all('"arguments": <args-json-object>' in e for e in parsed.errors)


@pytest.mark.parametrize("body, problem", [
    ('["list_accounts"]', 'not a JSON object with a "name"'),
    ('{"arguments": {}}', 'not a JSON object with a "name"'),
    ('{"name": "transfer", "arguments": [1, 2]}', '"arguments" must be a JSON object'),
    ('{"name": "transfer", "arguments": "{oops"}', "string that is not JSON"),
    ('{"name": "transfer", "arguments": {"x": "' + "y" * 9000 + '"}}', "longer than"),
])
def test_parse_call_names_each_problem(body, problem):
  assert problem in parse_call(body, ["transfer"])


def test_string_arguments_are_decoded_and_missing_arguments_mean_none():
  assert parse_call('{"name": "t", "arguments": "{\\"a\\": 1}"}') == {"name": "t",
                                                                      "arguments": {"a": 1}}
  assert parse_call('{"name": "t"}') == {"name": "t", "arguments": {}}


def test_a_reply_without_calls_is_the_plain_answer_and_is_json_serialisable():
  parsed = parse_reply("<think>\nsum it\n</think>\n\nThe total is 42.", tools=TOOLS)
  assert [(p.kind, p.action) for p in parsed.parts] == [("text", "The total is 42.")]
  json.dumps([p.action for p in parse_reply(TWO_CALLS, tools=TOOLS).parts])


def test_games_keep_their_action_format_and_ignore_drafts_in_the_thinking():
  fmt = "<action>{}</action>"
  text = "<think>\n<action>guess 1 1 1</action> is weak\n</think>\n\n<action>guess 1 2 3</action>"
  assert [(p.kind, p.action) for p in parse_reply(text).parts] == [("text", "guess 1 2 3")]
  (part,) = parse_reply("<think>\nonly <action>up</action> here\n</think>\n\nhmm").parts
  assert part.kind == "error"
  assert part.error == MISSING_ACTION.format(example="<action>YOUR ACTION</action>")
  assert extract_action("a <action> up </action> b <action>down</action>", fmt) == "down"
  assert extract_action("ANSWER: 42", "ANSWER: {}") == "42"


def test_visible_text_handles_a_prompt_opened_think_and_an_unfinished_one():
  assert visible_text("reasoning only\n</think>\n\nanswer") == "answer"  # <think> in the prompt
  assert visible_text("<think>\nstill thinking when the reply was cut") == ""
  assert visible_text("no reasoning at all") == "no reasoning at all"


def test_the_chat_template_announces_the_format_the_parser_reads():
  rendered = load_tokenizer("tiny").apply_chat_template(
      [{"role": "user", "content": "hi"}], tools=TOOLS, add_generation_prompt=True)
  assert CALL_FORMAT in rendered
  call = '<tool_call>\n{"name": "transfer", "arguments": {"amount_cents": 5}}\n</tool_call>'
  assert parse_reply(call, tools=TOOLS).calls == [{"name": "transfer",
                                                   "arguments": {"amount_cents": 5}}]


LONG_REPLY_CHARS = 110_000  # a quadratic parser takes seconds here, a linear one milliseconds
CALL = '<tool_call>\n{"name": "transfer", "arguments": {"amount_cents": 5}}\n</tool_call>\n'


def _repeat(text: str) -> str:
  return text * (LONG_REPLY_CHARS // len(text))


def _parse_seconds(parse, text: str):
  start = time.perf_counter()
  parsed = parse(text)
  return time.perf_counter() - start, parsed


def _tool_problem(text: str) -> str:
  return " ".join(parse_reply(text, tools=TOOLS).errors)


def _game_problem(text: str) -> str:
  return " ".join(parse_reply(text).errors)


def _designer_problem(text: str) -> str:
  return parse_designer_output(text).detail


@pytest.mark.parametrize("problem, head, tag, expected", [
    (_tool_problem, "", "<tool_call>", "never closed"),
    (_game_problem, "", "<action>", "No action found"),
    (_designer_problem, "```python\nclass Env:\n  pass\n```\n", "<hint>", "never closed"),
])
def test_a_long_reply_of_unclosed_tags_parses_in_linear_time(problem, head, tag, expected):
  seconds, found = _parse_seconds(problem, head + _repeat(tag))
  assert seconds < 0.5, f"{LONG_REPLY_CHARS} characters of {tag} took {seconds:.2f} s"
  assert expected in found


def test_a_long_reply_of_closed_calls_still_parses_every_call_quickly():
  seconds, parsed = _parse_seconds(lambda text: parse_reply(text, tools=TOOLS), _repeat(CALL))
  assert seconds < 0.5 and len(parsed.calls) == LONG_REPLY_CHARS // len(CALL)
  assert not parsed.errors and parsed.calls[-1]["arguments"] == {"amount_cents": 5}


def test_the_parser_imports_without_jax():  # the evaluation reuses it outside the trainer
  code = ("import sys, spade_jax.selfplay.replies; "
          "assert not [m for m in ('jax', 'flax', 'spade_jax.engine') if m in sys.modules]")
  subprocess.run([sys.executable, "-c", code], check=True,
                 cwd=pathlib.Path(__file__).parents[2])
