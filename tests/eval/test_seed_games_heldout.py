"""Held-out seed games: the split is disjoint from training's, and replayed solver actions
score a full return (corrupted episodes the exact expected share)."""


import pytest

from spade_jax.envs import library
from spade_jax.eval.suites import get_suite
from spade_jax.sandbox.pool import SandboxPool
from tests.envs import seedlib_play
from tests.envs.test_seed_solvers_games_a import SOLVERS as SOLVERS_A
from tests.envs.test_seed_solvers_games_b import SOLVERS as SOLVERS_B

SOLVERS = {**SOLVERS_A, **SOLVERS_B}


class _Recorder(seedlib_play.Episode):
  def __init__(self, name, seed):
    super().__init__(name, seed)
    self.actions = []

  def act(self, action):
    self.actions.append(action)
    return super().act(action)


def _solution(name: str, seed: int) -> list[str]:
  ep = _Recorder(name, seed)
  SOLVERS[name](ep)
  assert ep.total > 0.99
  return [f"I'll try this. <action>{a}</action>" for a in ep.actions]


def test_split_is_one_game_per_category_and_disjoint():
  held = library.load_seed_library(kind="games", split="heldout")
  train = library.load_seed_library(kind="games", split="train")
  assert sorted(s.category for s in held) == sorted(library.GAME_CATEGORIES)
  assert not {s.name for s in held} & {s.name for s in train}
  assert len(held) + len(train) == len(library.load_seed_library(kind="games"))


def test_score_replays_solutions_and_corruptions():
  suite = get_suite("seed_games_heldout")
  items = suite.items(6)  # every held-out game, first reset seed
  responses = []
  for i, it in enumerate(items):
    good = {"arm": "hint", "replies": _solution(it.reference["game"], it.reference["seed"])}
    no_action = {"arm": "no_hint", "replies": ["I have no idea"]}
    responses.append([dict(good, arm="no_hint"), good] if i % 2 else [no_action, good])
  with SandboxPool(num_workers=2) as pool:
    records = suite.score(items, responses, pool)
  summary = suite.summarize(records)
  assert summary.value == pytest.approx(0.5) and summary.n == 6 and summary.unscored == 0
  assert summary.extra["return_with_hint"] == pytest.approx(1.0)
  assert summary.extra["hint_gap"] == pytest.approx(0.5)
