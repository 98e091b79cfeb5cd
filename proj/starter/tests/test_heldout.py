"""Held-out minigames: two splits of unseen instances, none a training source, large enough
for a standard error of 0.03, registered as suites, and scored by replaying episodes in the
real sandbox (the oracle's actions earn the whole return; pass@1 and the hint gap follow)."""

import itertools

import pytest

from proj.starter import heldout, minigames, registry
from proj.starter.build import SIZES
from proj.starter.variants import minigame_candidates, normalise_source
from spade_jax.eval.config import EvalConfig
from spade_jax.eval.suites import get_suite
from spade_jax.sandbox.pool import SandboxPool


def _sources(games) -> set[str]:
  return {normalise_source(g.source) for g in games}


def test_each_split_holds_unseen_distinct_games_of_every_family():
  largest_build = max(size.minigame_count for size in SIZES.values())
  trained = _sources(itertools.islice(minigame_candidates(0), largest_build))
  trained |= _sources(minigames.library())
  splits = {name: heldout.split_games(seed) for name, seed in heldout.SPLIT_SEEDS.items()}
  for games in splits.values():
    assert len(_sources(games.values())) == len(games)  # distinct
    assert not _sources(games.values()) & trained
    per_family = {f: sum(g.family == f for g in games.values()) for f in heldout.FAMILIES}
    assert set(per_family.values()) == {heldout.INSTANCES}
  dev, final = splits.values()
  assert not _sources(dev.values()) & _sources(final.values())


def test_a_split_is_large_enough_for_the_standard_error_asked():
  suite = get_suite("minigames_heldout")
  items = suite.items()
  assert len({(i.reference["game"], i.reference["seed"]) for i in items}) == len(items)
  assert 0.5 / len(items) ** 0.5 <= heldout.MAX_STDERR  # returns in [0, 1], any spread


def test_the_splits_are_registered_suites_the_eval_config_accepts():
  assert registry.PRESETS  # imported: the suites are registered
  EvalConfig(suites=("minigames_heldout", "minigames_final"))
  assert get_suite("minigames_final").name == "minigames_final"
  with pytest.raises(ValueError, match="minigame split 'minigames_dev'"):
    heldout.MinigamesHeldout("minigames_dev")


def _oracle_replies(pool, suite, items) -> list[list[str]]:
  """Each item's oracle actions (a reset and oracle_actions() in the sandbox) as replies."""
  games = suite.games()
  keys = [("oracle", n) for n in range(len(items))]
  pool.reset([(k, games[i.reference["game"]].source, i.reference["seed"])
              for k, i in zip(keys, items, strict=True)])
  plans = pool.oracle_actions(keys)
  pool.close_episodes(keys)
  assert all(p.actions for p in plans), [p.error_detail for p in plans if not p.actions]
  return [[f"<action>{a}</action>" for a in p.actions] for p in plans]


def test_replayed_oracle_episodes_earn_the_whole_return_in_both_arms():
  """One game of each family, first reset seed: the hinted arm plays the oracle, the
  no-hint arm plays it on every other item and says nothing on the rest."""
  suite = get_suite("minigames_heldout")
  items = suite.items()
  items = [next(i for i in items if suite.games()[i.reference["game"]].family == f)
           for f in heldout.FAMILIES]
  with SandboxPool(num_workers=2) as pool:
    replies = _oracle_replies(pool, suite, items)
    responses = [[{"arm": "no_hint", "replies": r if n % 2 else ["no idea"]},
                  {"arm": "hint", "replies": r}] for n, r in enumerate(replies)]
    records = suite.score(items, responses, pool)
  summary = suite.summarize(records)
  played = sum(n % 2 for n in range(len(items))) / len(items)  # the no-hint oracle's share
  assert summary.n == len(heldout.FAMILIES) and summary.unscored == 0
  assert summary.extra["return_with_hint"] == pytest.approx(1.0)
  assert summary.value == pytest.approx(played)
  assert summary.extra["hint_gap"] == pytest.approx(1.0 - played)
  assert summary.extra["pass_at_1"] == pytest.approx(played)
  for n, family in enumerate(heldout.FAMILIES):  # one item each: its own arms' returns
    assert summary.extra[f"return_{family}"] == pytest.approx(n % 2)
    assert summary.extra[f"return_with_hint_{family}"] == pytest.approx(1.0)
