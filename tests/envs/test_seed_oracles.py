"""Every seed environment's oracle_actions() solves its instance: full return, in order."""

import pytest

from spade_jax.sandbox import contract, guards
from tests.envs.seedlib_play import GAME_SEEDS, Episode, seeds_by_name

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


@pytest.mark.parametrize("name", [n for n in NAMES if seeds_by_name()[n].kind == "tool_use"])
def test_tool_seed_oracles_meet_every_user_instruction_in_turn(name):
  """What the validator's `instructions` guard reads: each request once, in order."""
  for seed in GAME_SEEDS:
    ep = Episode(name, seed)
    for action in ep.env.oracle_actions():
      ep.act(action)
    ongoing = [(obs, 0.0, False, False) for obs in ep.trace[:-1]]
    run = guards.Run(0, "oracle", seed, fingerprint=(*ongoing, (ep.trace[-1], 0.0, True, False)))
    posed = guards.posed_instructions(run)
    assert posed == ep.env.requests and len(posed) >= contract.MIN_INSTRUCTIONS, (name, seed)
