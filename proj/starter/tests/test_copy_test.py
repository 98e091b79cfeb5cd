"""The repeat test: it tells a model that copies from one that cannot, read off real forwards."""

import numpy as np
import pytest

from proj.starter import registry
from proj.starter.copy_test import repeat_test
from spade_jax.model.testing import random_model


def _copier(cfg):
  """A stand-in whose logits name the next token once the context repeats (a perfect
  copier): the repeat test must score its repeat as solved and its first copy as chance."""

  class Oracle:
    def __init__(self):
      self.cfg = cfg

    def __call__(self, tokens):
      tokens = np.asarray(tokens)
      length = tokens.shape[1] // 2
      logits = np.zeros(tokens.shape + (cfg.vocab_size,), np.float32)
      for t in range(length - 1, tokens.shape[1] - 1):  # from the last token of copy one on
        logits[np.arange(len(tokens)), t, tokens[:, t + 1]] = 30.0
      return logits

  return Oracle()


def test_a_random_model_scores_both_copies_alike_and_a_copier_does_not():
  cfg = registry.PRESETS["starter-ci"].replace(compute_dtype="float32")
  plain = repeat_test(random_model(cfg, seed=0), 20)
  assert plain["repeat_top1"] == 0.0
  assert plain["first_nll"] == pytest.approx(plain["repeat_nll"], abs=0.05)
  assert plain["first_nll"] == pytest.approx(np.log(cfg.vocab_size), abs=0.1)
  copier = repeat_test(_copier(cfg), 20)
  assert copier["repeat_top1"] == 1.0 and copier["repeat_nll"] < 1e-6
  assert copier["first_nll"] == pytest.approx(np.log(cfg.vocab_size), abs=0.1)


def test_first_id_outside_the_vocabulary_is_one_clear_error():
  model = random_model(registry.PRESETS["starter-ci"].replace(compute_dtype="float32"), seed=0)
  with pytest.raises(ValueError, match=r"first_id=4096 outside the vocabulary \[0, 4096\)"):
    repeat_test(model, 4096)
