"""Designer rewards, the environment memory's eviction/sampling rule and its state round trip."""

import json

import numpy as np
import pytest

from spade_jax.selfplay.designer_rewards import (
  ArmReturns,
  ema_learning_potential,
  get_designer_reward,
  hint_regret,
)
from spade_jax.selfplay.memory import EnvMemory, MemoryEntry


def test_hint_regret_pools_the_whole_window():
  r = ArmReturns()
  r.add_step(no_hint=[0.0, 0.0], hint=[1.0, 1.0])
  r.add_step(no_hint=[1.0, 0.5], hint=[1.0])  # one hint episode dropped
  assert hint_regret(r) == pytest.approx(3.0 / 3 - 1.5 / 4)


def test_hint_regret_is_none_without_an_arm():
  r = ArmReturns()
  r.add_step(no_hint=[0.0], hint=[])
  assert hint_regret(r) is None
  assert ema_learning_potential(ArmReturns()) is None


def test_ema_learning_potential():
  r = ArmReturns()
  r.add_step(no_hint=[0.0, 1.0], hint=[])  # p = 0.5
  assert ema_learning_potential(r) == pytest.approx(1.0)
  r.add_step(no_hint=[1.0, 1.0], hint=[])  # p = 1 -> ema 0.75
  assert ema_learning_potential(r) == pytest.approx(4 * 0.75 * 0.25)
  r.add_step(no_hint=[], hint=[1.0])  # a step without no-hint data is skipped
  assert ema_learning_potential(r) == pytest.approx(4 * 0.75 * 0.25)


def test_unknown_reward_name_fails_clearly():
  with pytest.raises(ValueError, match="designer_reward='nope'"):
    get_designer_reward("nope")


def entry(uid, p=None, regret=None, step=0, category="c"):
  return MemoryEntry(uid, f"src {uid}", f"hint {uid}", category, "designed", step,
                     win_rate_no_hint=p, win_rate_hint=None, regret=regret)


def test_eviction_drops_off_frontier_then_low_regret_then_oldest():
  m = EnvMemory(3, [entry("frontier", p=0.5, regret=0.1, step=0),
                    entry("mastered", p=1.0, regret=0.0, step=5),
                    entry("hopeless_regret", p=0.0, regret=0.6, step=1)])
  assert m.upsert(entry("new_frontier", p=0.3, regret=0.0, step=9)) == "mastered"
  assert m.upsert(entry("new_high", p=0.4, regret=0.2, step=9)) == "hopeless_regret"
  # All on the frontier now: the lowest regret goes, the oldest among equals.
  assert m.upsert(entry("x", p=0.5, regret=0.0, step=3)) == "x"  # below everything stored
  assert m.upsert(entry("y", p=0.5, regret=0.5, step=3)) == "new_frontier"
  assert sorted(e.uid for e in m.entries) == ["frontier", "new_high", "y"]


def test_a_hint_that_hurts_is_kept_as_an_example_but_never_frontier():
  """Signed regret: -0.5 (misleading hint) is not the +0.5 of a real frontier environment."""
  hurts, frontier = entry("hurts", p=0.5, regret=-0.5, step=9), entry("real", p=0.5, regret=0.5)
  assert frontier.on_frontier and not hurts.on_frontier
  assert hurts.weight() == pytest.approx(0.1) and frontier.weight() == pytest.approx(1.6)
  # Kept while there is room (the designer sees it with its regret) ...
  m = EnvMemory(3, [hurts, frontier, entry("mastered", p=1.0, regret=0.0, step=0)])
  assert len(m) == 3 and m.get("hurts").view().regret == -0.5
  # ... but ranked with the off-frontier entries: evicted before older frontier ones, even
  # one with regret 0 (by |regret| it would outrank them all).
  assert m.upsert(entry("fresh", p=0.5, regret=0.0, step=1)) == "mastered"
  assert m.upsert(entry("fresh2", p=0.4, regret=0.1, step=2)) == "hurts"
  # Sampled only at the floor weight: 0.1 against 1.6 for the real frontier entry.
  m = EnvMemory(4, [hurts, frontier])
  rng = np.random.default_rng(1)
  counts = {"hurts": 0, "real": 0}
  for _ in range(2000):
    counts[m.sample(1, rng)[0].uid] += 1
  assert 0 < counts["hurts"] < counts["real"] / 8


def test_off_the_frontier_a_hint_that_hurts_goes_before_positive_regret():
  """Among off-frontier entries too, eviction follows max(regret, 0), not |regret|: a newer
  entry whose hint hurts (-0.7) goes before an older hopeless one the hint rescues (+0.6)."""
  m = EnvMemory(2, [entry("hopeless", p=0.0, regret=0.6, step=1),
                    entry("hurts", p=0.5, regret=-0.7, step=5)])
  assert not m.get("hopeless").on_frontier and not m.get("hurts").on_frontier
  assert m.upsert(entry("frontier", p=0.5, regret=0.1, step=2)) == "hurts"


def test_upsert_of_a_known_uid_replaces_without_evicting():
  m = EnvMemory(2, [entry("a", p=0.5), entry("b", p=0.5)])
  assert m.upsert(entry("a", p=0.9, step=7)) is None
  assert m.get("a").step == 7 and len(m) == 2


def test_sampling_prefers_frontier_and_requested_categories():
  m = EnvMemory(10, [entry("f1", p=0.5, category="x"), entry("f2", p=0.3, regret=0.5,
                                                              category="x"),
                     entry("done", p=1.0, category="x"), entry("other", p=0.5, category="y")])
  counts = {e.uid: 0 for e in m.entries}
  rng = np.random.default_rng(0)
  for _ in range(2000):
    for e in m.sample(1, rng, categories=["x"]):
      counts[e.uid] += 1
  # Weights 0.1 + frontier + max(regret, 0): f1 1.1, f2 1.6, done 0.1; "other" only tops up.
  assert counts["other"] == 0
  assert counts["f2"] > counts["f1"] > 5 * counts["done"] > 0
  # A larger sample than the category holds tops up from the rest, without duplicates.
  picked = m.sample(4, rng, categories=["x"])
  assert sorted(e.uid for e in picked) == ["done", "f1", "f2", "other"]
  assert [e.uid for e in m.sample(5, rng, exclude=["f1"])].count("f1") == 0


def test_sampling_is_deterministic_and_order_independent():
  a = EnvMemory(10, [entry(u, p=0.5) for u in "abcdef"])
  b = EnvMemory(10, [entry(u, p=0.5) for u in "fedcba"])
  pick = lambda m: [e.uid for e in m.sample(3, np.random.default_rng(7))]
  assert pick(a) == pick(b)


def test_state_round_trip_through_json():
  m = EnvMemory(4, [entry("a", p=0.5, regret=0.25, step=3), entry("b")])
  state = json.loads(json.dumps(m.state_dict()))
  back = EnvMemory(1)
  back.load_state_dict(state)
  assert back.capacity == 4 and back.entries == m.entries
  assert back.state_dict() == m.state_dict()
