"""Designer output parsing: one python block + one <hint>, every malformed case named."""

import pytest

from spade_jax.selfplay.designer import parse_designer_output
from tests.selfplay.selfplay_fakes import designer_reply, env_source

GOOD = designer_reply("A", hint="probe first, then say win")


def test_valid_output_gives_source_and_hint():
  parsed = parse_designer_output(GOOD)
  assert parsed.ok
  assert parsed.source == env_source("A")
  assert parsed.hint == "probe first, then say win"


def test_drafts_inside_the_thinking_do_not_count():
  draft = (f"<think>\nA first try:\n```python\n{env_source('B')}```\n<hint>draft</hint>\n"
           "</think>\n\n")
  parsed = parse_designer_output(draft + GOOD)
  assert parsed.ok and parsed.source == env_source("A")
  assert parsed.hint == "probe first, then say win"
  assert parse_designer_output(draft + "no final answer").error == "no_code_block"


def test_hint_before_block_and_unterminated_last_line_are_fine():
  text = f"<hint> use the parity </hint>\n```py\n{env_source('A')}```"
  parsed = parse_designer_output(text)
  assert parsed.ok and parsed.hint == "use the parity"


@pytest.mark.parametrize("text, finish, error", [
    ("I would write a game where you guess numbers. <hint>guess</hint>", "stop", "no_code_block"),
    ("```json\n{}\n```\n<hint>h</hint>", "stop", "no_code_block"),
    (f"```python\n{env_source('A')}```\n```python\nx = 1\n```\n<hint>h</hint>", "stop",
     "multiple_code_blocks"),
    (f"```python\n{env_source('A')}\n{env_source('B', class_name='Other')}```\n<hint>h</hint>",
     "stop", "multiple_classes"),
    ("```python\ndef reset(seed):\n  return 'x', {}\n```\n<hint>h</hint>", "stop", "no_class"),
    (f"```python\n{env_source('A')}```\nno hint at all", "stop", "no_hint"),
    (f"```python\n{env_source('A')}```\n<hint>a</hint><hint>b</hint>", "stop",
     "multiple_hints"),
    (f"```python\n{env_source('A')}```\n<hint>  </hint>", "stop", "empty_hint"),
    (GOOD[:60], "length", "truncated"),  # cut inside the code block by max_new_tokens
    (GOOD, "length", "truncated"),  # even a complete-looking output that hit the cap
    (GOOD, "cache_full", "truncated"),
    (f"```python\n{env_source('A')}", "stop", "truncated"),  # fence never closed
    (f"```python\n{env_source('A')}```\n<hint>say w", "stop", "truncated"),  # open hint
])
def test_malformed_outputs_are_named(text, finish, error):
  parsed = parse_designer_output(text, finish)
  assert not parsed.ok
  assert parsed.error == error, parsed.detail
  assert parsed.detail


def test_long_prompts_drop_memory_then_halve_the_passage():
  from spade_jax.selfplay.chat import ChatFormatter
  from spade_jax.selfplay.designer import DesignRequest, fitted_prompt
  from spade_jax.selfplay.prompts import MemoryView
  from tests.selfplay.selfplay_fakes import ByteTokenizer
  fmt = ChatFormatter(ByteTokenizer())
  memory = tuple(MemoryView("c", env_source(t), "h", 0.5, 1.0, 0.5) for t in "ABC")
  req = DesignRequest(0, "c", "doc", "p" * 1000, memory)
  full = fitted_prompt(fmt, req, "games", None)
  bare = fitted_prompt(fmt, DesignRequest(0, "c", "doc", "p" * 1000), "games", None)
  one = fitted_prompt(fmt, DesignRequest(0, "c", "doc", "p" * 1000, memory[:1]), "games", None)
  assert fitted_prompt(fmt, req, "games", len(full)) == full
  assert fitted_prompt(fmt, req, "games", len(one)) == one  # two entries dropped
  shorter = fitted_prompt(fmt, req, "games", len(bare) - 1)  # passage halved
  assert len(shorter) <= len(bare) - 500 and "p" * 500 in fmt.tokenizer.decode(shorter)
  with pytest.raises(ValueError, match="max_cache_len"):
    fitted_prompt(fmt, req, "games", 100)
