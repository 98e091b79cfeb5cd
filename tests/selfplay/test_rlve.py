"""Fixed-env RLVE: RLVE's sliding difficulty window, by hand and through the loop."""

import numpy as np
import pytest

from spade_jax.envs.difficulty import at_level, declared_levels
from spade_jax.sandbox.fake import FakePool
from spade_jax.selfplay import rlve
from spade_jax.selfplay.loop import SelfPlayLoop
from spade_jax.selfplay.memory import MemoryEntry
from tests.selfplay.selfplay_fakes import (
  ByteTokenizer,
  FakeTrainer,
  ScriptedPolicy,
  make_engine,
  make_settings,
)

TOK = ByteTokenizer()


def leveled_source(tag: str, levels: int = 3) -> str:
  return f'''\
import random


class LevelEnv:
  max_turns = 2
  difficulty_levels = {levels}
  difficulty = 0

  def reset(self, seed=None):
    n = random.Random(seed).randint(0, 10**9)
    return f"[env {tag}] level {{self.difficulty}} instance {{n}}. Say win.", {{}}

  def step(self, action):
    if action == "win":
      return "you win", 1.0, True, False, {{}}
    return "you lose", 0.0, True, False, {{}}
'''


def test_window_rule_by_hand():
  w = rlve.DifficultyWindows({"e": 10}, group_size=2)  # a check needs 8 x 2 = 16 episodes
  assert w.window("e") == (0, 0)
  w.record("e", 0, [1.0] * 15)
  assert w.update() == {} and w.upper["e"] == 0  # not enough episodes yet
  w.record("e", 0, [0.0])  # 15 / 16 = 0.9375 >= 0.9
  assert w.update() == {"e": pytest.approx(15 / 16)} and w.upper["e"] == 1
  assert w.window("e") == (0, 1)
  w.record("e", 0, [1.0] * 16)  # below the upper bound: not counted
  assert w.update() == {}
  w.record("e", 1, [1.0] * 14 + [0.0] * 2)  # 0.875 < 0.9: stays, counters restart
  assert w.update() == {"e": pytest.approx(0.875)} and w.upper["e"] == 1
  w.upper["e"] = 6
  assert w.window("e") == (3, 6)  # at most WINDOW_SIZE = 4 levels
  rng = np.random.default_rng(0)
  assert {w.sample_level("e", rng) for _ in range(200)} == {3, 4, 5, 6}
  w.upper["e"] = 9
  w.record("e", 9, [1.0] * 16)
  w.update()
  assert w.upper["e"] == 9  # the last declared level is the top
  assert w.sample_level("no-levels", rng) is None


def test_state_round_trip_and_mismatch():
  w = rlve.DifficultyWindows({"a": 3, "b": 4}, group_size=1)
  w.record("a", 0, [1.0] * 3)
  again = rlve.DifficultyWindows({"a": 3, "b": 4}, group_size=1)
  again.load_state_dict(w.state_dict())
  assert again.state_dict() == w.state_dict()
  with pytest.raises(ValueError, match="RLVE state covers"):
    rlve.DifficultyWindows({"a": 3}, group_size=1).load_state_dict(w.state_dict())


def test_at_level_pins_the_class_attribute():
  source = leveled_source("X")
  assert declared_levels(source) == 3 and declared_levels("class A:\n  pass\n") is None
  pinned = at_level(source, 2)
  assert pinned.endswith("\nLevelEnv.difficulty = 2\n") and pinned.startswith(source.rstrip())
  with pytest.raises(ValueError, match=r"level 3 is not in \[0, 3\)"):
    at_level(source, 3)


def make_rlve_loop(action):
  library = [MemoryEntry(f"seed/{t}", leveled_source(t), "say win", c, "seed", -1, max_turns=2)
             for t, c in (("S1", "s1"), ("S2", "s2"))]
  policy = ScriptedPolicy(TOK, {}, lambda tag, hinted, step, turn: f"<action>{action}</action>")
  loop = SelfPlayLoop(make_settings(fixed_envs="rlve"), engine=make_engine(policy),
                      pool=FakePool(), tokenizer=TOK, trainer=FakeTrainer(), corpus=None,
                      seed_envs=library)
  return loop, policy


def test_an_agent_that_always_wins_raises_the_window():
  loop, policy = make_rlve_loop("win")
  # G = 2 no-hint episodes per environment per step: a check every 8 steps.
  records = [loop.step() for _ in range(8)]
  assert not policy.designer_calls
  assert all(e.difficulty == 0 and not e.returns["hint"] for r in records for e in r.envs)
  assert loop.rlve.upper == {"seed/S1": 1, "seed/S2": 1}
  levels, uppers = set(), []
  for _ in range(40):  # level 1 is drawn about half the time from the window [0, 1]
    record = loop.step()
    levels |= {e.difficulty for e in record.envs}
    assert all(f"level {e.difficulty} instance" in e.first_observation for e in record.envs)
    uppers.append(loop.rlve.upper["seed/S1"])
  assert levels == {0, 1, 2}  # played at the new levels
  assert uppers == sorted(uppers) and uppers[-1] == 2  # rose again and stopped at the top
  assert loop.state_dict()["rlve"]["upper"] == {"seed/S1": 2, "seed/S2": 2}


def test_an_agent_that_always_loses_keeps_the_window():
  loop, _ = make_rlve_loop("lose")
  records = [loop.step() for _ in range(24)]
  assert loop.rlve.upper == {"seed/S1": 0, "seed/S2": 0}
  assert {e.difficulty for r in records for e in r.envs} == {0}
