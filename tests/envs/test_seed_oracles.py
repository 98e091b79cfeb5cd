"""Every seed environment's oracle_actions() solves its instance: full return, in order."""

import pytest
from seedlib_play import GAME_SEEDS, Episode, seeds_by_name

NAMES = sorted(seeds_by_name())


@pytest.mark.parametrize("name", NAMES)
def test_oracle_actions_reach_the_full_return(name):
  for seed in GAME_SEEDS:
    ep = Episode(name, seed)
    actions = ep.env.oracle_actions()
    assert isinstance(actions, list) and actions, (name, seed)
    for action in actions:
      ep.act(action)
    assert ep.terminated and 0.99 <= ep.total <= 1 + 1e-9, (name, seed, ep.total, ep.obs)
    assert ep.turns <= type(ep.env).max_turns
