"""The tokenizer interface shared by the Hugging Face and the SentencePiece tokenizers."""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from spade_jax.tokenizer import chat_template as chat_lib
from spade_jax.tokenizer import plain_text

# Control tokens of the Qwen3 chat format (every Qwen3 tokenizer and the tiny one carry them).
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
CHAT_SPECIAL_TOKENS: tuple[str, ...] = (
    ENDOFTEXT, IM_START, IM_END, "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>")


class Tokenizer(abc.ABC):
  """Text <-> ids plus chat formatting with the tokenizer's own jinja2 chat template.

  Subclasses set `chat_template` (jinja2 source) and `special_tokens_map` (e.g.
  {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}) and implement the abstract
  methods. Ids of added/special tokens are found in text: encoding a rendered chat turns
  "<|im_start|>" into its single id. `encode_chat` keeps that for the template's markup and
  the assistant's turns only: the other messages and the tools are untrusted text, whose
  control-token strings encode as plain characters (`plain_text`).
  """

  chat_template: str
  special_tokens_map: dict[str, str]

  @abc.abstractmethod
  def encode(self, text: str) -> list[int]:
    """Token ids of `text` (no BOS/EOS added)."""

  @abc.abstractmethod
  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`, special tokens included verbatim."""

  @abc.abstractmethod
  def token_to_id(self, token: str) -> int | None:
    """Id of a vocabulary entry (e.g. "<|im_end|>"), None if absent."""

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Number of ids the tokenizer can emit (added tokens included)."""

  def _special_id(self, key: str) -> int:
    token = self.special_tokens_map.get(key)
    token_id = None if token is None else self.token_to_id(token)
    if token_id is None:
      raise ValueError(f"{type(self).__name__} has no {key} (special tokens: "
                       f"{self.special_tokens_map})")
    return token_id

  @property
  def eos_id(self) -> int:
    """Id that ends an assistant turn (<|im_end|> for Qwen3 chat models)."""
    return self._special_id("eos_token")

  @property
  def pad_id(self) -> int:
    return self._special_id("pad_token")

  @property
  def stop_ids(self) -> tuple[int, ...]:
    """Ids at which generation stops: eos, plus <|im_end|>/<|endoftext|> when present."""
    ids = [self.eos_id]
    for token in (IM_END, ENDOFTEXT):
      token_id = self.token_to_id(token)
      if token_id is not None and token_id not in ids:
        ids.append(token_id)
    return tuple(ids)

  def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                          tools: Sequence[Mapping[str, Any]] | None = None,
                          add_generation_prompt: bool = True, **kwargs: Any) -> str:
    """Renders a conversation to text exactly as transformers' apply_chat_template(tokenize=False).

    Args:
      messages: [{"role": "system"|"user"|"assistant"|"tool", "content": str, optional
        "tool_calls": [{"function": {"name", "arguments"}}], "reasoning_content": str}].
      tools: JSON schemas of the tools ({"type": "function", "function": {...}}), or None.
      add_generation_prompt: end with the header of a new assistant turn.
      **kwargs: extra template variables, e.g. enable_thinking=False.
    """
    return chat_lib.render_chat(self.chat_template, messages, tools=tools,
                                add_generation_prompt=add_generation_prompt,
                                special_tokens=self.special_tokens_map, **kwargs)

  @property
  def control_tokens(self) -> tuple[str, ...]:
    """Strings the encoder turns into control ids wherever they occur in text.

    These are the Qwen3 chat tokens and the special tokens that the vocabulary has;
    subclasses that know their added tokens list them all.
    """
    candidates = (*CHAT_SPECIAL_TOKENS, *self.special_tokens_map.values())
    return tuple(t for t in candidates if self.token_to_id(t) is not None)

  @functools.cached_property
  def controls(self) -> plain_text.ControlTokens:
    """Marks for the control tokens inside untrusted text (see `plain_text`)."""
    return plain_text.ControlTokens(self.control_tokens)

  def encode_plain(self, text: str) -> list[int]:
    """Ids of `text` with control-token strings read as ordinary characters."""
    return [i for piece in self.controls.plain_pieces(text) for i in self.encode(piece)]

  def encode_marked(self, text: str) -> list[int]:
    """Ids of rendered text: marks as plain text (`encode_plain`), the rest as `encode`."""
    return [i for piece, plain in self.controls.segments(text)
            for i in (self.encode_plain(piece) if plain else self.encode(piece))]

  def render_marked(self, messages: Sequence[Mapping[str, Any]],
                    tools: Sequence[Mapping[str, Any]] | None = None, **kwargs: Any) -> str:
    """`apply_chat_template` with the untrusted text (every message but the assistant's, and
    the tools) marked; `encode_marked` encodes the result."""
    marked_tools = None if tools is None else self.controls.mark(tools)
    return self.apply_chat_template(self.controls.mark_messages(messages), tools=marked_tools,
                                    **kwargs)

  def encode_chat(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[int]:
    """Ids of the rendered chat where only the template's markup and the assistant's turns
    hold control tokens: `encode_marked(render_marked(messages, **kwargs))`."""
    return self.encode_marked(self.render_marked(messages, **kwargs))
