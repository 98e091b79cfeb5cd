"""The hand-built copying circuit: its RoPE weighting, the previous-token head's attention read
from the model's own layers, the copying it gives a random starter-shaped model, and the
Hugging Face round trip."""

import numpy as np
import pytest

from proj.starter import copy_circuit, registry
from proj.starter.copy_test import repeat_test
from spade_jax.model import from_pretrained, save_pretrained
from spade_jax.model.layers import apply_rope, rope_cos_sin
from spade_jax.model.testing import random_model

FIRST_ID = 20  # past the control tokens


@pytest.fixture(scope="module")
def cfg():
  return registry.PRESETS["starter"].replace(compute_dtype="float32")


@pytest.fixture(scope="module")
def wired(cfg):
  model = random_model(cfg, seed=0)
  summary = copy_circuit.install(model, seed=0)
  return model, summary


def test_the_rope_weighting_peaks_one_position_back_over_every_distance(cfg):
  freqs, weights, margin = copy_circuit.previous_token_rope(
      cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, 12)
  distances = np.arange(cfg.max_position_embeddings)
  score = np.cos(np.outer(distances - 1, freqs)) @ weights  # [D]
  assert np.isclose(weights.sum(), 1.0) and (weights >= 0).all()
  assert int(np.argmax(score)) == 1
  others = np.delete(score, 1)
  assert score[1] - others.max() == pytest.approx(margin, abs=1e-6)
  assert margin > 0.2


def test_the_previous_token_head_attends_one_position_back(cfg, wired):
  model, _ = wired
  attn, length = model.layer(0).attn, 300
  ids = np.random.default_rng(1).integers(FIRST_ID, cfg.vocab_size, (1, length))
  h = model.layer(0).input_norm(model.embed(ids))  # [1, T, D]
  cos, sin = rope_cos_sin(np.arange(length)[None], cfg.head_dim, cfg.rope_theta)
  q = np.asarray(apply_rope(attn.q_norm(attn.q_proj(h)), cos, sin))[0, :, 0]  # [T, Hd]
  k = np.asarray(apply_rope(attn.k_norm(attn.k_proj(h)), cos, sin))[0, :, 0]
  scores = np.where(np.tril(np.ones((length, length), bool)), q @ k.T * attn.scale, -np.inf)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  rows = np.arange(1, length)
  assert (probs.argmax(-1)[1:] == rows - 1).all()
  assert probs[rows, rows - 1].min() > 0.9


def test_a_random_model_copies_only_with_the_circuit(cfg, wired):
  plain = repeat_test(random_model(cfg, seed=0), FIRST_ID)
  assert plain["repeat_top1"] == 0.0
  assert abs(plain["repeat_nll"] - plain["first_nll"]) < 0.1  # nothing to copy with
  wired_scores = repeat_test(wired[0], FIRST_ID)
  assert wired_scores["repeat_top1"] > 0.6
  assert wired_scores["repeat_nll"] < wired_scores["first_nll"] - 10


def test_the_wired_model_saves_and_loads_as_a_plain_qwen3(tmp_path, wired):
  model, summary = wired
  save_pretrained(model, tmp_path / "wired")
  loaded = from_pretrained(tmp_path / "wired", dtype="float32", compute_dtype="float32")
  assert repeat_test(loaded, FIRST_ID) == repeat_test(model, FIRST_ID)
  assert summary["previous_token_margin"] > 0.2


@pytest.mark.parametrize("change, says", [
    (dict(tie_word_embeddings=False), "tie_word_embeddings is false"),
    (dict(num_layers=1), "num_layers=1 < 2"),
])
def test_a_shape_it_cannot_wire_is_one_clear_error(change, says):
  cfg = registry.PRESETS["starter-ci"].replace(compute_dtype="float32", **change)
  model = random_model(cfg, seed=0)
  with pytest.raises(ValueError, match=says) as err:
    copy_circuit.install(model)
  assert "\n" not in str(err.value)


def test_too_many_frequency_pairs_is_one_clear_error():
  model = random_model(registry.PRESETS["starter-ci"].replace(compute_dtype="float32"), seed=0)
  with pytest.raises(ValueError, match=r"match_pairs=17 outside \[1, head_dim/2=16\]"):
    copy_circuit.install(model, settings=copy_circuit.CircuitSettings(match_pairs=17))
