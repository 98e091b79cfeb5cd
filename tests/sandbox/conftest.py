"""Shared fixtures for the sandbox tests: one strict pool with short timeouts."""

import os

import pytest
from sandbox_procs import settled_descendants

from spade_jax.sandbox.pool import SandboxPool


@pytest.fixture(scope="module")
def pool():
  # Timeouts are short to keep the hostile cases fast, long enough for a loaded machine.
  with SandboxPool(num_workers=2, max_turns=8, reset_timeout_s=1.5, step_timeout_s=1.0,
                   validation_timeout_s=2.0) as p:
    yield p


@pytest.fixture
def clean_pool(pool):
  """The module pool, checked afterwards to hold only its workers (outer + zygote each)."""
  yield pool
  pool.close_episodes(list(pool._live))
  left = settled_descendants(os.getpid(), 2 * len(pool._workers))
  assert len(left) == 2 * len(pool._workers), f"leftover processes: {sorted(left)}"
