"""Vendi score / n on hand-computable cases, and the fixed reference embedding."""

import math

import numpy as np
import pytest

from spade_jax.envs.library import load_seed_library
from spade_jax.metrics import vendi


def test_identical_sources_give_one_over_n():
  src = "class Env:\n  def reset(self, seed=None):\n    return 'x', {}\n"
  for n in (1, 2, 5):
    assert vendi.vendi_per_n([src] * n) == pytest.approx(1.0 / n, abs=1e-9)


def test_disjoint_vocabularies_are_orthogonal():
  sources = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"]
  embedder = vendi.TfidfLsa(sources)
  assert vendi.vendi_per_n(sources, embedder) == pytest.approx(1.0, abs=1e-9)


def test_two_documents_at_known_angle():
  # Embeddings with cosine c: K/n has eigenvalues (1 +- c)/2, Vendi = exp(entropy).
  c = 0.6
  emb = np.array([[1.0, 0.0], [c, math.sqrt(1 - c * c)]])
  lam = np.array([(1 + c) / 2, (1 - c) / 2])
  assert vendi.vendi_score(emb) == pytest.approx(math.exp(-np.sum(lam * np.log(lam))), rel=1e-9)


def test_tfidf_by_hand_with_the_reference_idf_and_unknown_tokens():
  # reference "a a b", "a c": tf = 1 + log(count); idf = log((1 + 2) / (1 + df)) + 1.
  embedder = vendi.TfidfLsa(["a a b", "a c"])  # vocab [a, b, c]
  x, oov = embedder.tfidf(["a a b", "a z z"])
  idf_a, idf_bc = 1.0, math.log(1.5) + 1.0
  row0 = np.array([(1 + math.log(2)) * idf_a, idf_bc, 0.0])
  np.testing.assert_allclose(x[0], row0 / np.linalg.norm(row0), rtol=1e-12)
  assert not oov[0].any()
  # "a z z": a in vocabulary (weight 1 * idf 1); z unknown: weight 1 + log 2 times the
  # largest idf log(1 + 2) + 1, in its own coordinate (the only unknown token).
  w_z = (1 + math.log(2)) * (math.log(3) + 1)
  norm = math.sqrt(1 + w_z * w_z)
  np.testing.assert_allclose(x[1], [1 / norm, 0, 0], rtol=1e-12)
  np.testing.assert_allclose(oov, [[0.0], [w_z / norm]], rtol=1e-12)


def test_lsa_keeps_cosines_of_the_reference_and_truncates_dims():
  reference = ["a b", "b c", "c d e", "a e"]
  full = vendi.TfidfLsa(reference, dims=128)
  assert full.dims == 4  # min(128, rank)
  x, _ = full.tfidf(reference)
  z = full.embed(reference)
  np.testing.assert_allclose(z @ z.T, x @ x.T, atol=1e-10)
  assert vendi.TfidfLsa(reference, dims=2).dims == 2


def test_reference_embedding_is_fixed_so_steps_compare():
  embedder = vendi.reference_embedder()
  assert embedder.dims == vendi.LSA_DIMS  # the seed chunks have rank >= 128
  seeds = [s.source for s in load_seed_library()]
  alone = embedder.embed(seeds[:1])
  with_others = embedder.embed(seeds[:5])
  np.testing.assert_allclose(alone[0], with_others[0], atol=1e-12)
  assert vendi.reference_embedder() is embedder  # fitted once per process


def test_unknown_words_are_neither_zero_nor_all_alike():
  z = vendi.reference_embedder().embed(["qwertyuiop", "asdfghjkl"])
  np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0)
  assert abs(z[0] @ z[1]) < 1e-12


def test_unseen_identifiers_never_collide():
  """Many new environments with distinct new identifiers stay distinct (no hash buckets)."""
  scaffold = "class {0}:\n  def reset(self, seed=None):\n    return '{0}_obs', {{}}\n"
  n = 200
  z = vendi.reference_embedder().embed([scaffold.format(f"Env{i}Novel{i * 7919}")
                                        for i in range(n)])
  off_diagonal = (z @ z.T)[~np.eye(n, dtype=bool)]
  # Every pair shares exactly the scaffold: one shared unknown coordinate would lift a pair.
  c = off_diagonal.mean()
  assert off_diagonal.max() - off_diagonal.min() < 1e-9 and 0 < c < 1
  # Equicorrelated kernel: eig(K / n) = (1 + (n - 1) c) / n once, (1 - c) / n n - 1 times.
  lam = np.array([(1 + (n - 1) * c) / n] + [(1 - c) / n] * (n - 1))
  assert vendi.vendi_score(z) == pytest.approx(math.exp(-np.sum(lam * np.log(lam))), rel=1e-6)


def test_vendi_per_n_of_the_step_24_copies_and_24_seed_games():
  """The paper's Vendi/n over the step's 24 environments: 1/24 for copies, high for seeds."""
  seeds = [s.source for s in load_seed_library()][:24]
  assert len(seeds) == 24
  assert vendi.vendi_per_n([seeds[0]] * 24) == pytest.approx(1 / 24, abs=1e-9)
  assert vendi.vendi_per_n(seeds) > 0.4
  # Over the step's budget n: 12 distinct sources of a 24-environment step count half.
  assert vendi.vendi_per_n(seeds[:12], n=24) == pytest.approx(vendi.vendi_per_n(seeds[:12]) / 2)


def test_missing_sentence_transformers_is_a_clear_error(monkeypatch):
  import sys
  monkeypatch.setitem(sys.modules, "sentence_transformers", None)
  with pytest.raises(ImportError, match="embedding_model='/models/minilm'.*sentence-transformers"):
    vendi.SentenceEmbedder("/models/minilm")


def test_empty_set_is_nan():
  assert math.isnan(vendi.vendi_per_n([]))


def test_metrics_settings_check_the_model_directory(tmp_path):
  from spade_jax.config_schema import base_config
  from spade_jax.metrics.config import MetricsConfig
  assert MetricsConfig.from_config(base_config()).embedder() is None  # off by default
  with pytest.raises(ValueError, match="embedding_model='/no/such/model': expected a directory"):
    MetricsConfig("/no/such/model")
  assert MetricsConfig(str(tmp_path)).embedding_model == str(tmp_path)
  from spade_jax.config_schema import ConfigError, validate
  config = base_config()
  config.metrics.embedding_model = "/no/such/model"
  with pytest.raises(ConfigError, match="embedding_model='/no/such/model'"):
    validate(config)  # at launch, before anything is built
