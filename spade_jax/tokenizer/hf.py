"""A Hugging Face `tokenizer.json` (e.g. Qwen3's) through the `tokenizers` library.

The chat template is the checkpoint's own: `chat_template.jinja` (transformers 5 layout) or the
`chat_template` field of `tokenizer_config.json` (transformers 4 layout; a string, or a list
of named templates where "default" is used and "tool_use" when tools are given). A checkpoint
with neither gets the Qwen3-format template shipped with spade_jax.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import tokenizers

from spade_jax.tokenizer import base, plain_text
from spade_jax.tokenizer import chat_template as chat_lib

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")


def _token_content(value: Any, path: pathlib.Path, key: str) -> str | None:
  """A special token entry is a string or an AddedToken dict {"content": ...}."""
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, Mapping) and isinstance(value.get("content"), str):
    return value["content"]
  raise ValueError(f"{path}: field {key!r} must be a string or {{'content': str}}, got {value!r}")


def _read_json(path: pathlib.Path) -> dict[str, Any]:
  try:
    with path.open(encoding="utf-8") as f:
      data = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from e
  if not isinstance(data, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
  return data


class HFTokenizer(base.Tokenizer):
  """Wraps `tokenizers.Tokenizer` with the chat template and special tokens of its directory."""

  def __init__(self, directory: str | pathlib.Path):
    directory = pathlib.Path(directory)
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
      raise FileNotFoundError(f"{tokenizer_file}: missing (a Hugging Face tokenizer directory "
                              "needs tokenizer.json)")
    try:
      self._tok = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    except Exception as e:  # the Rust library raises a bare Exception on malformed files
      raise ValueError(f"{tokenizer_file}: cannot be parsed by `tokenizers` ({e})") from e
    self._match_markup_before_normalization()
    config_file = directory / "tokenizer_config.json"
    config = _read_json(config_file) if config_file.is_file() else {}
    self.special_tokens_map = {}
    for key in _SPECIAL_KEYS:
      token = _token_content(config.get(key), config_file, key)
      if token is not None:
        self.special_tokens_map[key] = token
    self._template_tokens = dict(self.special_tokens_map)  # what transformers shows templates
    # Qwen3 chat checkpoints: eos <|im_end|>, pad <|endoftext|>; fill whatever is missing.
    if self.token_to_id(base.IM_END) is not None:
      self.special_tokens_map.setdefault("eos_token", base.IM_END)
    if self.token_to_id(base.ENDOFTEXT) is not None:
      self.special_tokens_map.setdefault("pad_token", base.ENDOFTEXT)
    self._templates = self._read_templates(directory, config, config_file)
    self.chat_template = self._templates["default"]

  def _match_markup_before_normalization(self) -> None:
    """Makes every markup added token match in the raw text only (`normalized: false`, as
    Qwen3's are).

    `plain_text` marks control-token strings in the raw text; a token matched after a
    normalizer that folds characters (NFKC turns "\uff1cthink\uff1e" into "<think>") could
    otherwise be formed by untrusted text that holds no such string.
    """
    normalized = [t for t in self._tok.get_added_tokens_decoder().values()
                  if t.normalized and plain_text.is_markup(t.content)]
    self._tok.add_tokens([
        tokenizers.AddedToken(t.content, single_word=t.single_word, lstrip=t.lstrip,
                              rstrip=t.rstrip, normalized=False, special=t.special)
        for t in normalized])

  @staticmethod
  def _read_templates(directory: pathlib.Path, config: Mapping[str, Any],
                      config_file: pathlib.Path) -> dict[str, str]:
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
      return {"default": jinja_file.read_text(encoding="utf-8")}
    template = config.get("chat_template")
    if template is None:
      return {"default": chat_lib.default_chat_template()}
    if isinstance(template, str):
      return {"default": template}
    if isinstance(template, list) and all(
        isinstance(t, Mapping) and isinstance(t.get("name"), str)
        and isinstance(t.get("template"), str) for t in template):
      named = {t["name"]: t["template"] for t in template}
      if "default" not in named:
        raise ValueError(f"{config_file}: field 'chat_template' lists {sorted(named)} but no "
                         "'default' template")
      return named
    raise ValueError(f"{config_file}: field 'chat_template' must be a string or a list of "
                     f"{{'name', 'template'}}, got {type(template).__name__}")

  def encode(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int]) -> str:
    return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

  def token_to_id(self, token: str) -> int | None:
    return self._tok.token_to_id(token)

  @property
  def control_tokens(self) -> tuple[str, ...]:
    """Every added token: `tokenizers` matches them all in text, special or not (Qwen3's
    <think> and <tool_call> are added tokens that are not special)."""
    return tuple(t.content for t in self._tok.get_added_tokens_decoder().values())

  @property
  def vocab_size(self) -> int:
    return self._tok.get_vocab_size(with_added_tokens=True)

  def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                          tools: Sequence[Mapping[str, Any]] | None = None,
                          add_generation_prompt: bool = True, **kwargs: Any) -> str:
    template = self._templates.get("tool_use") if tools is not None else None
    return chat_lib.render_chat(template or self.chat_template, messages, tools=tools,
                                add_generation_prompt=add_generation_prompt,
                                special_tokens=self._template_tokens, **kwargs)
