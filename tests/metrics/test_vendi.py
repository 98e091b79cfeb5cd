"""Vendi score / n on hand-computable cases."""

import math

import numpy as np
import pytest

from spade_jax.metrics import vendi


def test_identical_sources_give_one_over_n():
  src = "class Env:\n  def reset(self, seed=None):\n    return 'x', {}\n"
  for n in (1, 2, 5):
    assert vendi.vendi_per_n([src] * n) == pytest.approx(1.0 / n, abs=1e-9)


def test_disjoint_vocabularies_are_orthogonal():
  sources = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"]
  assert vendi.vendi_per_n(sources) == pytest.approx(1.0, abs=1e-9)


def test_two_documents_at_known_angle():
  # Embeddings with cosine c: K/n has eigenvalues (1 +- c)/2, Vendi = exp(entropy).
  c = 0.6
  emb = np.array([[1.0, 0.0], [c, math.sqrt(1 - c * c)]])
  lam = np.array([(1 + c) / 2, (1 - c) / 2])
  assert vendi.vendi_score(emb) == pytest.approx(math.exp(-np.sum(lam * np.log(lam))), rel=1e-9)


def test_tfidf_by_hand():
  # docs "a a b", "a c": tf = 1 + log(count); idf = log((1 + 2) / (1 + df)) + 1.
  x = vendi.tfidf(["a a b", "a c"])  # vocab [a, b, c]
  idf_a, idf_bc = 1.0, math.log(1.5) + 1.0
  row0 = np.array([(1 + math.log(2)) * idf_a, idf_bc, 0.0])
  row1 = np.array([idf_a, 0.0, idf_bc])
  np.testing.assert_allclose(x[0], row0 / np.linalg.norm(row0), rtol=1e-12)
  np.testing.assert_allclose(x[1], row1 / np.linalg.norm(row1), rtol=1e-12)


def test_lsa_keeps_cosines_and_truncates_dims():
  x = vendi.tfidf(["a b", "b c", "c d e", "a e"])
  z = vendi.lsa(x, dims=128)
  assert z.shape == (4, 4)  # min(128, rank)
  np.testing.assert_allclose(z @ z.T, x @ x.T, atol=1e-10)
  assert vendi.lsa(x, dims=2).shape == (4, 2)


def test_empty_set_is_nan():
  assert math.isnan(vendi.vendi_per_n([]))
