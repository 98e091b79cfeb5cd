"""`selfplay.designer_advantage`: each choice against a NumPy reference, through the trainer's
own group normalisation (rl/advantages.py), and the choices in the loop."""

import numpy as np
import pytest

from spade_jax import config_schema
from spade_jax.rl.advantages import compute_advantages
from spade_jax.selfplay.batching import build_train_batch, designer_samples
from spade_jax.selfplay.config import ConfigError, SelfPlayConfig
from spade_jax.selfplay.designer_advantage import DESIGNER_ADVANTAGES, designer_targets
from spade_jax.selfplay.schedule import PendingDesign, ScoredDesign

# Issue 26's example: 4 invalid designs and valid ones with regret 0, 0.1, 0.2, 0.3.
REGRETS = [0.0, 0.1, 0.2, 0.3]


def _scored(regrets=REGRETS, invalid=4, refresh=1, categories=None, unmeasured=1):
  designs = []
  for i, r in enumerate([*regrets, *[None] * invalid, *["unmeasured"] * unmeasured]):
    category = categories[i] if categories else "c"
    uid = None if r is None else f"d{refresh}.{i}"
    d = PendingDesign(refresh, refresh + 4, i, category, [5, 6, 7], 1, [-0.1, -0.2], uid)
    designs.append(ScoredDesign(d, None if r in (None, "unmeasured") else r))
  return designs


def _advantages(scored, mode, **kw):
  """Row index -> advantage, as the trainer computes it from the built batch."""
  samples = designer_samples(designer_targets(scored, mode, **kw))
  if not samples:
    return {}
  batch = build_train_batch(samples, pad_id=0)
  adv, _ = compute_advantages(batch.rewards, batch.group_ids, batch.roles,
                              offsets=batch.advantage_offsets)
  index = [t.design.index for t in designer_targets(scored, mode, **kw)]
  return dict(zip(index, adv.tolist(), strict=True))


def _z(x):
  x = np.asarray(x, np.float64)
  return (x - x.mean()) / (x.std() + 1e-6)


def test_discard_is_the_paper_and_the_default():
  adv = _advantages(_scored(), "discard")
  assert sorted(adv) == [0, 1, 2, 3]  # no row for the invalid nor for the unmeasured design
  np.testing.assert_allclose([adv[i] for i in range(4)], _z(REGRETS), rtol=1e-5)
  assert adv[0] < 0  # regret 0 is pushed down among valid designs, not up
  assert SelfPlayConfig().designer_advantage == "discard"
  assert config_schema.base_config().selfplay.designer_advantage == "discard"
  assert _advantages(_scored(regrets=[]), "discard") == {}  # all invalid: no rows


def test_penalty_puts_invalid_rows_in_the_refresh_group():
  adv = _advantages(_scored(), "penalty", invalid_reward=-1.0)
  expected = _z([*REGRETS, -1.0, -1.0, -1.0, -1.0])
  np.testing.assert_allclose([adv[i] for i in range(8)], expected, rtol=1e-5)
  # The numbers: about -0.99 for invalid, +0.73 ... +1.25 for valid.
  assert adv[4] == pytest.approx(-0.99, abs=0.01) and adv[0] == pytest.approx(0.73, abs=0.01)
  assert adv[3] == pytest.approx(1.25, abs=0.01)


@pytest.mark.parametrize("weight", [1.0, 0.5])
def test_two_level_adds_a_validity_term_to_regret_among_the_valid(weight):
  adv = _advantages(_scored(), "two_level", validity_weight=weight)
  valid = np.array([1, 1, 1, 1, 0, 0, 0, 0], np.float64)
  expected = weight * _z(valid) + np.concatenate([_z(REGRETS), np.zeros(4)])
  np.testing.assert_allclose([adv[i] for i in range(8)], expected, rtol=1e-5, atol=1e-6)
  # Regret differences keep their full weight: the same spread as "discard".
  np.testing.assert_allclose(adv[3] - adv[0], _z(REGRETS)[3] - _z(REGRETS)[0], rtol=1e-5)
  # An all-invalid refresh has rows but no signal; an all-valid one is plain "discard".
  assert set(_advantages(_scored(regrets=[]), "two_level").values()) == {0.0}
  np.testing.assert_allclose(list(_advantages(_scored(invalid=0), "two_level").values()),
                             _z(REGRETS), rtol=1e-5)


def test_grouping_by_category_normalises_within_each_category():
  cats = ["a", "a", "b", "b", "a", "b", "a", "b", "a"]
  adv = _advantages(_scored(categories=cats), "penalty", by_category=True)
  a, b = [0, 1, 4, 6], [2, 3, 5, 7]
  rewards = [*REGRETS, -1.0, -1.0, -1.0, -1.0]
  for rows in (a, b):
    np.testing.assert_allclose([adv[i] for i in rows], _z([rewards[i] for i in rows]),
                               rtol=1e-5)
  discard = _advantages(_scored(categories=cats), "discard", by_category=True)
  for rows in ([0, 1], [2, 3]):  # the valid designs of each category: regret among them only
    np.testing.assert_allclose([discard[i] for i in rows], _z([REGRETS[i] for i in rows]),
                               rtol=1e-5)
  two = _advantages(_scored(categories=cats), "two_level", by_category=True)
  np.testing.assert_allclose([two[i] for i in a], _z([1, 1, 0, 0]) + [*_z([0.0, 0.1]), 0, 0],
                             rtol=1e-5, atol=1e-6)


def test_bad_settings_fail_clearly():
  """The registry's names are the accepted ones; anything else is one line naming the field."""
  assert tuple(DESIGNER_ADVANTAGES) == ("discard", "penalty", "two_level")
  for name in DESIGNER_ADVANTAGES:
    assert SelfPlayConfig(designer_advantage=name).designer_advantage == name
  with pytest.raises(ValueError, match=r"designer_advantage='best': expected one of \("
                     r"'discard', 'penalty', 'two_level'\)$"):
    designer_targets(_scored(), "best")
  with pytest.raises(ConfigError, match="selfplay.designer_advantage='best'"):
    SelfPlayConfig(designer_advantage="best")
  with pytest.raises(ConfigError, match="selfplay.validity_weight=-1"):
    SelfPlayConfig(validity_weight=-1)
