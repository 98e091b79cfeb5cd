"""Tokenizers: Qwen3 tokenizer.json (via `tokenizers`) and the bundled tiny SentencePiece one.

Both render chats with jinja2 chat templates exactly as transformers does; see `base.Tokenizer`.
"""

from __future__ import annotations

import os
import pathlib

from spade_jax import storage
from spade_jax.tokenizer.base import CHAT_SPECIAL_TOKENS, Tokenizer
from spade_jax.tokenizer.chat_template import default_chat_template, render_chat
from spade_jax.tokenizer.hf import HFTokenizer
from spade_jax.tokenizer.sentencepiece_tokenizer import (
  TINY_VOCAB_SIZE,
  SentencePieceTokenizer,
  load_tiny,
  tiny_model_path,
)

_HUB_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
              "special_tokens_map.json"]


def load_tokenizer(path_or_name: str | os.PathLike[str]) -> Tokenizer:
  """Loads a tokenizer by name, local path or Hugging Face hub id.

  Args:
    path_or_name: "tiny" (bundled SentencePiece, vocab 1024); a SentencePiece `.model` file;
      a directory with tokenizer.json (+ tokenizer_config.json / chat_template.jinja), either
      local or a gs:// URL (copied with `storage.local_copy`); or a hub id such as
      "Qwen/Qwen3-0.6B" (downloaded with huggingface_hub; needs network).
  """
  name = os.fspath(path_or_name)
  if name == "tiny":
    return load_tiny()
  path = storage.local_copy(name) if storage.is_url(name) else pathlib.Path(name).expanduser()
  if path.is_file() and path.suffix == ".model":
    return SentencePieceTokenizer(path)
  if path.is_dir():
    return HFTokenizer(path)
  if path.exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
    raise FileNotFoundError(
        f"tokenizer {name!r}: expected 'tiny', a SentencePiece .model file, a directory with "
        "tokenizer.json, or a hub id 'org/name'")
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  return HFTokenizer(huggingface_hub.snapshot_download(name, allow_patterns=_HUB_FILES))


__all__ = ["CHAT_SPECIAL_TOKENS", "HFTokenizer", "SentencePieceTokenizer", "TINY_VOCAB_SIZE",
           "Tokenizer", "default_chat_template", "load_tiny", "load_tokenizer", "render_chat",
           "tiny_model_path"]
