"""Token ids of chat turns for conversations that live in the engine's KV cache.

The engine keeps every conversation's tokens (prompt and sampled replies, exactly as
sampled), so after a reply only the *next* message has to be sent. That delta is what
the chat template puts between the end of the assistant's reply and the start of the
next assistant turn: the end-of-turn marker, the new user (or tool) message and the
generation prompt. It is found by rendering a placeholder conversation with the
tokenizer's own template, so any template the tokenizer carries works, and the sampled
tokens are never re-tokenised (re-encoding decoded text can change them, which would
break the match between behaviour log-probs and tokens).

Everything but the assistant's turns (observations, tool results, tool specs, the hint) is
untrusted text: its control-token strings encode as plain characters
(`Tokenizer.encode_chat`), so an environment cannot forge a turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_USER = "\x00spade-user\x00"
_REPLY = "\x00spade-reply\x00"


class ChatFormatter:
  """Prompt ids and per-turn delta ids from a tokenizer with a chat template."""

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer

  def prompt_ids(self, messages: Sequence[Mapping[str, Any]],
                 tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
    """Ids of a new conversation, ending with the assistant generation prompt."""
    return self.tokenizer.encode_chat(messages, tools=tools, add_generation_prompt=True)

  def turn_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
    """Template text after an assistant reply: end of turn, the messages, generation prompt.

    Several tool results in a row render as the template renders them (Qwen3: one user turn
    holding a <tool_response> block each).
    """
    return self.tokenizer.controls.unmark(self._marked_turn_text(messages))

  def _marked_turn_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
    """`turn_text` with the messages' control-token strings marked (`Tokenizer.render_marked`)."""
    rendered = self.tokenizer.render_marked(
        [{"role": "user", "content": _USER}, {"role": "assistant", "content": _REPLY},
         *messages], add_generation_prompt=True)
    at = rendered.find(_REPLY)
    if at < 0:
      raise ValueError("the chat template dropped the assistant message; cannot continue "
                       "conversations with it")
    return rendered[at + len(_REPLY):]

  def turn_ids(self, messages: Sequence[Mapping[str, Any]],
               reply_tokens: Sequence[int]) -> list[int]:
    """Ids to append after `reply_tokens` (the sampled reply) to add `messages`.

    When the reply already ends with the template's end-of-turn token (it stopped on it),
    that token is in the cache and is not sent again.
    """
    ids = self.tokenizer.encode_marked(self._marked_turn_text(messages))
    if reply_tokens and ids and ids[0] == reply_tokens[-1]:
      ids = ids[1:]
    return ids
