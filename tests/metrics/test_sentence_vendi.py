"""The optional sentence-embedding Vendi on a real sentence-transformers model built here.

The model is a tiny random BERT with a hand-written WordPiece vocabulary, saved in the
sentence-transformers layout (Transformer + mean Pooling), so the real loading and encoding
path runs without any download.
"""

import os

import numpy as np
import pytest

st = pytest.importorskip("sentence_transformers")

from spade_jax.metrics import vendi  # noqa: E402
from spade_jax.metrics.config import MetricsConfig  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz",
         "class", "def", "self", "return", "reset", "step", "win", "seed"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  from sentence_transformers import models
  from transformers import BertConfig, BertModel, BertTokenizerFast
  root = tmp_path_factory.mktemp("minilm_like")
  (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  bert = root / "bert"
  BertModel(BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32,
                       max_position_embeddings=64)).save_pretrained(bert)
  BertTokenizerFast(vocab_file=str(root / "vocab.txt")).save_pretrained(bert)
  word = models.Transformer(str(bert), max_seq_length=64)
  pooling = models.Pooling(word.get_embedding_dimension(), "mean")
  out = root / "sentence_model"
  st.SentenceTransformer(modules=[word, pooling], device="cpu").save(str(out))
  return str(out)


def test_sentence_embeddings_are_unit_rows_and_feed_vendi(model_dir):
  embedder = MetricsConfig(model_dir).embedder()
  assert isinstance(embedder, vendi.SentenceEmbedder)
  sources = ["class a: def reset(self, seed)", "def step(self): return win",
             "class a: def reset(self, seed)"]
  z = embedder.embed(sources)
  assert z.shape == (3, 16)
  np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, rtol=1e-9)
  np.testing.assert_allclose(z[0], z[2], atol=1e-6)  # the same text, the same embedding
  value = vendi.vendi_per_n(sources, embedder)
  assert vendi.vendi_per_n(sources[:1] * 3, embedder) == pytest.approx(1 / 3, abs=1e-6)
  assert 1 / 3 <= value <= 2 / 3 + 1e-9  # two distinct texts of three at most
  assert os.path.isdir(model_dir)
