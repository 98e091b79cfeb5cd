"""A real byte-level BPE trained the way a CI build trains its own, and its action-word pool."""

import pytest

from proj.starter import build, pretrain_text, registry, tokenizer_train, variants
from spade_jax.tokenizer import load_tokenizer


@pytest.fixture(scope="session")
def bpe(tmp_path_factory):
  """The tokenizer a `--size ci` build trains."""
  size = build.SIZES["ci"]
  tok = tokenizer_train.train(pretrain_text.documents(size.tokenizer_chars),
                              registry.PRESETS[size.preset].vocab_size)
  return load_tokenizer(tokenizer_train.save(tok, tmp_path_factory.mktemp("bpe")))


@pytest.fixture(scope="session")
def words(bpe):
  return variants.action_words(bpe)
