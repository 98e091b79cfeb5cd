"""The suite registry: name -> factory(data path or None) -> Suite.

Offline suites carry their data (installed packages, the seed library); the loaders of
benchmarks whose data users bring need `data` (a file path; `--data NAME=PATH`). A project
beside the core adds its own with `register_suite` when it is imported (proj/starter's
held-out minigames).
"""

from __future__ import annotations

from collections.abc import Callable

from spade_jax.eval.suite import Suite


def _reasoning_gym(data):
  from spade_jax.eval.suites.reasoning_gym import ReasoningGym
  return ReasoningGym()


def _humaneval(data):
  from spade_jax.eval.suites.humaneval import HumanEval
  return HumanEval()


def _seed_games(data):
  from spade_jax.eval.suites.seed_games import SeedGamesHeldout
  return SeedGamesHeldout()


def _bfcl(data):
  from spade_jax.eval.suites.bfcl import BFCLMultiTurn
  return BFCLMultiTurn()


def _aime(data):
  from spade_jax.eval.suites.user_data import Aime
  return Aime(data)


def _gpqa(data):
  from spade_jax.eval.suites.user_data import Gpqa
  return Gpqa(data)


def _livecodebench(data):
  from spade_jax.eval.suites.livecodebench import LiveCodeBench
  return LiveCodeBench(data)


def _tau2(data):
  from spade_jax.eval.suites.agent_benchmarks import Tau2
  return Tau2(data)


def _acebench(data):
  from spade_jax.eval.suites.agent_benchmarks import AceBenchAgent
  return AceBenchAgent(data)


SUITES: dict[str, Callable[[str | None], Suite]] = {
    "reasoning_gym": _reasoning_gym,
    "humaneval": _humaneval,
    "seed_games_heldout": _seed_games,
    "bfcl_v4_multi_turn": _bfcl,
    "aime": _aime,
    "gpqa": _gpqa,
    "livecodebench": _livecodebench,
    "tau2": _tau2,
    "acebench": _acebench,
}
OFFLINE = ("reasoning_gym", "humaneval", "seed_games_heldout", "bfcl_v4_multi_turn")


def register_suite(name: str, factory: Callable[[str | None], Suite]) -> None:
  """Adds `factory` as suite `name`. The same factory again is a no-op; another under a taken
  name is refused."""
  if SUITES.setdefault(name, factory) is not factory:
    raise ValueError(f"suite {name!r} is taken by another factory")


def get_suite(name: str, data: str | None = None) -> Suite:
  if name not in SUITES:
    raise ValueError(f"unknown suite {name!r}; known: {sorted(SUITES)}")
  return SUITES[name](data)
