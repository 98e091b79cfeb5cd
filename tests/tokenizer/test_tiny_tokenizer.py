"""The bundled SentencePiece tokenizer and the loader."""

import pytest

from spade_jax.model import get_preset
from spade_jax.tokenizer import (
  CHAT_SPECIAL_TOKENS,
  SentencePieceTokenizer,
  load_tokenizer,
  tiny_model_path,
)

TEXTS = [
    "jnp.linalg.norm(x, ord=2) computes the spectral norm; see numpy.linalg.norm.",
    "Ünïcödé — naïve café, 数学, emoji 🧮, tabs\tand\n\nnewlines  with  double spaces ",
    "<|im_start|>user\nWhat is 12*7?<|im_end|>\n<|im_start|>assistant\n<think>\n84\n</think>",
]


@pytest.fixture(scope="module")
def tiny():
  return load_tokenizer("tiny")


def test_vocab_matches_tiny_preset(tiny):
  assert tiny.vocab_size == get_preset("tiny").vocab_size == 1024


@pytest.mark.parametrize("text", TEXTS)
def test_roundtrip_any_text(tiny, text):
  ids = tiny.encode(text)
  assert tiny.decode(ids) == text
  assert all(0 <= i < tiny.vocab_size for i in ids)
  assert tiny.token_to_id("<unk>") not in ids  # byte fallback instead of <unk>


def test_control_tokens_are_single_ids(tiny):
  ids = {tiny.token_to_id(t) for t in CHAT_SPECIAL_TOKENS}
  assert None not in ids and len(ids) == len(CHAT_SPECIAL_TOKENS)
  for token in CHAT_SPECIAL_TOKENS:
    assert tiny.encode(token) == [tiny.token_to_id(token)]
  assert tiny.eos_id == tiny.token_to_id("<|im_end|>")
  assert tiny.pad_id == tiny.token_to_id("<|endoftext|>")
  assert tiny.token_to_id("<not-a-token>") is None


def test_chat_concatenates_per_turn(tiny):
  """Encoding a rendered chat equals encoding its turns separately (no merges across turns)."""
  messages = [{"role": "user", "content": "Integrate x^2."},
              {"role": "assistant", "content": "x^3/3 + C"}]
  text = tiny.apply_chat_template(messages, add_generation_prompt=False)
  assert text == ("<|im_start|>user\nIntegrate x^2.<|im_end|>\n"
                  "<|im_start|>assistant\nx^3/3 + C<|im_end|>\n")
  turns = text.split("<|im_end|>\n")[:-1]
  per_turn = [i for t in turns for i in tiny.encode(t + "<|im_end|>\n")]
  assert tiny.encode(text) == per_turn


def test_compression_on_corpus_text(tiny):
  text = "Compute the eigenvalues of a complex Hermitian or real symmetric matrix."  # in corpus
  assert len(tiny.encode(text)) < len(text) / 2.5


def test_load_tokenizer_paths(tmp_path):
  assert isinstance(load_tokenizer(tiny_model_path()), SentencePieceTokenizer)
  with pytest.raises(FileNotFoundError, match="tokenizer.json"):
    load_tokenizer(tmp_path)  # a directory without tokenizer.json
  with pytest.raises(FileNotFoundError, match="expected 'tiny'"):
    load_tokenizer(str(tmp_path / "missing" / "dir"))
  (tmp_path / "tokenizer.json").write_text("{}")
  with pytest.raises(ValueError, match="tokenizer.json: cannot be parsed"):
    load_tokenizer(tmp_path)
