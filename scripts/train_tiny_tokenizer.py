"""Trains the tiny SentencePiece BPE tokenizer (vocab 1024) on the built-in science corpus.

  .venv/bin/python scripts/train_tiny_tokenizer.py [--out spade_jax/tokenizer/assets/tiny.model]

Deterministic: the corpus comes in a fixed order, training uses one thread and no sentence
sampling or shuffling, so the same installed libraries give a byte-identical model. The Qwen3
chat control tokens are user-defined symbols (always one id each); byte fallback keeps any text
encodable; identity normalisation and no dummy prefix keep decode(encode(text)) == text.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import pathlib
import sys

import sentencepiece as spm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from spade_jax.selfplay.science_corpus import load_corpus  # noqa: E402
from spade_jax.tokenizer.base import CHAT_SPECIAL_TOKENS  # noqa: E402
from spade_jax.tokenizer.sentencepiece_tokenizer import TINY_VOCAB_SIZE, tiny_model_path  # noqa: E402


def corpus_lines() -> list[str]:
  """Non-blank lines of every document (SentencePiece trains on lines)."""
  return [line for doc in load_corpus() for line in doc["text"].splitlines()
          if line.strip()]


def train(out: pathlib.Path, vocab_size: int = TINY_VOCAB_SIZE) -> bytes:
  """Trains the model, writes it to `out` and returns its bytes."""
  lines = corpus_lines()
  model = io.BytesIO()
  spm.SentencePieceTrainer.Train(
      sentence_iterator=iter(lines), model_writer=model, model_type="bpe",
      vocab_size=vocab_size, byte_fallback=True, character_coverage=0.9995,
      normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
      split_digits=True, allow_whitespace_only_pieces=True, max_sentence_length=1 << 16,
      user_defined_symbols=list(CHAT_SPECIAL_TOKENS), unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
      num_threads=1, input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
  data = model.getvalue()
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_bytes(data)
  print(f"{out}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}, "
        f"trained on {len(lines)} lines")
  return data


def main() -> None:
  parser = argparse.ArgumentParser(prog="python scripts/train_tiny_tokenizer.py",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=pathlib.Path, default=tiny_model_path())
  parser.add_argument("--vocab-size", type=int, default=TINY_VOCAB_SIZE)
  args = parser.parse_args()
  train(args.out, args.vocab_size)


if __name__ == "__main__":
  main()
