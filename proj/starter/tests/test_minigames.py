"""Minigames: short template games that the real validator passes with every guard."""

import collections
import dataclasses
import itertools

import pytest

from proj.starter import minigames, variants
from spade_jax.envs.library import GAME_CATEGORIES
from spade_jax.sandbox.fake import FakePool
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.seed_envs import seed_entries


@pytest.fixture(scope="module")
def candidates():
  return list(itertools.islice(variants.minigame_candidates(0), 360))


def test_360_distinct_candidates_over_the_six_categories(candidates):
  keys = {variants.normalise_source(g.source) for g in candidates}
  assert len(keys) == len(candidates) == 360
  per_category = collections.Counter(g.category for g in candidates)
  assert set(per_category) == set(GAME_CATEGORIES) and min(per_category.values()) >= 50
  library = {variants.normalise_source(g.source) for g in minigames.library()}
  assert not library & keys  # the loop's first memory is not in the training set


def _all_valid(games) -> None:
  pool = SandboxPool(num_workers=2, require_oracle=True)
  try:
    results = pool.validate([g.source for g in games])
  finally:
    pool.close()
  rejected = [(g.uid, r.reason) for g, r in zip(games, results, strict=True) if not r.valid]
  assert not rejected, rejected[:5]


@pytest.mark.slow  # 360 sources through the host-driven validator (`make test-slow`)
def test_every_candidate_passes_the_validator_with_every_guard(candidates):
  _all_valid(candidates + list(minigames.library()))


def test_the_first_candidates_of_each_category_pass_the_validator(candidates):
  """`make test`'s share of the test above: five candidates a category and the library."""
  firsts = [g for category in GAME_CATEGORIES
            for g in [c for c in candidates if c.category == category][:5]]
  _all_valid(firsts + list(minigames.library()))


def test_peek_games_pass_the_validator_whatever_its_seeds():
  """The validator draws its seeds afresh each call. A peek game whose first observation
  listed its words in one order looked constant whenever the three oracle seeds hid the same
  word (21 of 300 validations here); the listing's order now varies with the seed. The
  first ten peek games at 30 fixed validation seeds, through the in-process pool (our own
  templates, not generated code)."""
  games = [minigames.minigame("peek", i) for i in range(10)]
  rejected = [(g.uid, seed, r.reason) for seed in range(30)
              for g, r in zip(games, FakePool(require_oracle=True, validation_seed=seed)
                              .validate([g.source for g in games]), strict=True)
              if not r.valid]
  assert not rejected, rejected[:5]


def test_minigames_are_deterministic_and_differ_by_index_and_seed():
  assert minigames.minigame("walk", 3) == minigames.minigame("walk", 3)
  assert minigames.minigame("walk", 3).uid == "mg0/walk/3"
  sources = {minigames.minigame("quiz", i).source for i in range(20)}
  assert len(sources) > 10
  assert minigames.minigame("quiz", 0, seed=1).source != minigames.minigame("quiz", 0).source
  with pytest.raises(ValueError, match="family 'chess'"):
    minigames.minigame("chess", 0)


def test_the_library_setting_fills_the_memory_with_minigames_of_the_skills():
  selfplay = SelfPlayConfig(library="minigames", skills=("planning", "probing"),
                            categories_per_step=2)
  entries = seed_entries(selfplay)
  families = [f for f, (category, _, _) in minigames.FAMILIES.items()
              if category in ("planning", "probing")]
  assert {e.category for e in entries} == {"planning", "probing"}
  assert len(entries) == 2 * len(families) == 6  # reach; locate and peek
  assert all(e.uid.startswith("mg1/") and "def oracle_actions" in e.source for e in entries)
  with pytest.raises(ValueError, match="selfplay.library"):
    SelfPlayConfig(setting="tool_use", library="minigames",
                   skills=("lookup", "transaction"), categories_per_step=2)


def test_a_fixed_env_baseline_library_holds_a_step_of_distinct_minigames():
  """Fixed-env GRPO plays num_envs library games a step, as many as SPADE plays designs."""
  spade = SelfPlayConfig(library="minigames", skills=("deduction",), categories_per_step=1,
                         num_envs=6)
  assert len(seed_entries(spade)) == 2  # SPADE's memory starts from two of the family
  grpo = seed_entries(dataclasses.replace(spade, fixed_envs="grpo"))
  assert len(grpo) == 6 and len({e.source for e in grpo}) == 6



def _returns(pool, game, seeds, choose) -> list[float]:
  """Each reset seed's return when `choose(observation)` picks every action."""
  keys = [(game.uid, s) for s in seeds]
  records = pool.reset([(k, game.source, s) for k, s in zip(keys, seeds, strict=True)])
  returns = []
  for key, record in zip(keys, records, strict=True):
    total = 0.0
    while not record.done:
      (record,) = pool.step([(key, choose(record.observation))])
      total += record.reward
    returns.append(total)
  pool.close_episodes(keys)
  return returns


def test_peek_games_validate_and_pay_the_probe_then_answer_strategy_alone():
  """About half the peek games' hints carry the strategy (name the probe action). Six of each
  kind pass every guard; in them, probing and then answering the observation's last word earns
  the whole return from every reset, and always answering the first listed word earns about
  one in the number of words."""
  drawn = [minigames.minigame("peek", i) for i in range(40)]
  probes = {g.uid: minigames.peek_probe(g.source) for g in drawn}
  carried = [g for g in drawn if probes[g.uid] in g.hint]
  assert 10 <= len(carried) <= 30
  games = carried[:6] + [g for g in drawn if g not in carried][:6]
  _all_valid(games)
  listed = lambda obs: obs.split("one of: ")[1].rstrip(".").split(", ")
  seeds = range(20)
  guessed, chance = [], []
  with SandboxPool(num_workers=2) as pool:
    for game in games:
      told = _returns(pool, game, seeds, lambda obs, p=probes[game.uid]: (
          p if "one of: " in obs else f"answer {obs.split()[-1]}"))
      assert told == [1.0] * len(seeds), game.uid
      guessed += _returns(pool, game, seeds, lambda obs: f"answer {listed(obs)[0]}")
      chance += [1 / len(minigames.peek_words(game.source))] * len(seeds)
  assert abs(sum(guessed) / len(guessed) - sum(chance) / len(chance)) < 0.1
