"""The trainers of one test module share their compiled steps: a test's trainer of the same
model structure, RL config and mesh as an earlier test's compiles nothing again."""

import pytest

from spade_jax.rl.trainer import CompiledSteps


@pytest.fixture(scope="module")
def compiled() -> CompiledSteps:
  return CompiledSteps()
