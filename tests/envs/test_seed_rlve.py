"""RLVE's adaptive window on real seed games: a scripted agent that always wins (the game's
hint solver) climbs to the top level, one that always fails stays at level 0."""

import numpy as np
import pytest

from spade_jax.selfplay import rlve
from tests.envs.seedlib_play import Episode, env_class
from tests.envs.test_seed_solvers_games_b import SOLVERS

GROUP = 4  # episodes per prompt (G); a check needs MIN_PROMPTS x G episodes at the top


def play(name, solver, level, seed):
  ep = Episode(name, seed, level)
  solver(ep)
  return ep.total


def never_wins(ep):
  while not ep.done:
    ep.act("I give up")


@pytest.mark.parametrize("name", ["coins", "switches"])
def test_the_window_climbs_for_a_winning_agent_and_stays_for_a_losing_one(name):
  levels = env_class(name).difficulty_levels
  for solver, expected_top in ((SOLVERS[name], levels - 1), (never_wins, 0)):
    windows = rlve.DifficultyWindows({name: levels}, group_size=GROUP)
    rng, played = np.random.default_rng(0), set()
    for prompt in range(rlve.MIN_PROMPTS * 4 * levels):
      level = windows.sample_level(name, rng)
      played.add(level)
      returns = [play(name, solver, level, 100 * prompt + g) for g in range(GROUP)]
      windows.record(name, level, returns)
      windows.update()
    assert windows.upper[name] == expected_top, (solver.__name__, windows.upper)
    assert played == set(range(expected_top + 1))
