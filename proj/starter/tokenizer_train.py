"""A byte-level BPE for Python source and science text, with the Qwen3 chat control tokens.

Pre-tokenisation is Qwen2/3's own: single digits (so numbers are spelt digit by digit),
letter runs with an optional leading non-letter (identifiers, ` self`), punctuation runs, and
whitespace runs split off before the next word, so that indentation (runs of spaces after a
newline) becomes a few learned pieces. The control tokens (`base.CHAT_SPECIAL_TOKENS`) are added
tokens, matched whole in any text, as in Qwen3's tokenizer.json; <|endoftext|>, <|im_start|>
and <|im_end|> are special. The saved directory has tokenizer.json and tokenizer_config.json
(chat_template = the project's Qwen3 template, eos <|im_end|>, pad <|endoftext|>), which
`spade_jax.tokenizer.load_tokenizer` and transformers' `AutoTokenizer` both open.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from spade_jax.tokenizer import chat_template
from spade_jax.tokenizer.base import CHAT_SPECIAL_TOKENS, ENDOFTEXT, IM_END, IM_START

# Qwen2 / Qwen3's pre-tokenizer pattern (tokenizer.json of Qwen/Qwen3-*).
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = (ENDOFTEXT, IM_START, IM_END)
MODEL_MAX_LENGTH = 131_072


def new_tokenizer() -> tokenizers.Tokenizer:
  """An untrained byte-level BPE with the Qwen3 pre-tokenizer and decoder."""
  tok = tokenizers.Tokenizer(models.BPE(byte_fallback=False))
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(tokenizers.Regex(SPLIT_PATTERN), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  return tok


def train(texts: Iterable[str], vocab_size: int) -> tokenizers.Tokenizer:
  """Trains the BPE on `texts` (deterministic for the same texts in the same order).

  The control tokens get the first ids in CHAT_SPECIAL_TOKENS order, then the 256 bytes.
  """
  tok = new_tokenizer()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size, min_frequency=2, show_progress=False,
      special_tokens=[tokenizers.AddedToken(t, special=t in SPECIAL, normalized=False)
                      for t in CHAT_SPECIAL_TOKENS],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer=trainer)
  # The trainer marks every added token special; Qwen3 keeps <think>, <tool_call>, ... plain.
  data = json.loads(tok.to_str())
  for entry in data["added_tokens"]:
    entry["special"] = entry["content"] in SPECIAL
  return tokenizers.Tokenizer.from_str(json.dumps(data))


def tokenizer_config() -> dict:
  """tokenizer_config.json: the chat template and the special tokens transformers reads."""
  return {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "chat_template": chat_template.default_chat_template(),
      "eos_token": IM_END, "pad_token": ENDOFTEXT, "bos_token": None, "unk_token": None,
      "model_max_length": MODEL_MAX_LENGTH, "clean_up_tokenization_spaces": False,
      "split_special_tokens": False, "add_bos_token": False, "add_eos_token": False,
  }


def save(tok: tokenizers.Tokenizer, directory: str | pathlib.Path) -> pathlib.Path:
  """Writes tokenizer.json and tokenizer_config.json into `directory`."""
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  tok.save(str(directory / "tokenizer.json"))
  (directory / "tokenizer_config.json").write_text(
      json.dumps(tokenizer_config(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
  return directory
