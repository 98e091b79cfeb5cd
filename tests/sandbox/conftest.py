"""Shared fixtures for the sandbox tests: one strict pool with short timeouts."""

import os

import pytest

from spade_jax.sandbox.pool import SandboxPool
from tests.sandbox.sandbox_procs import VALIDATION_SEED, descendants, describe, settled_descendants


@pytest.fixture(scope="module")
def pool():
  # Timeouts are short to keep the hostile cases fast, long enough for a loaded machine. The
  # validation seed is fixed so that FakePool(validation_seed=VALIDATION_SEED) can be
  # compared with it; training draws fresh seeds on every call.
  with SandboxPool(num_workers=2, max_turns=8, reset_timeout_s=1.5, step_timeout_s=1.0,
                   validation_seed=VALIDATION_SEED) as p:
    yield p


@pytest.fixture
def clean_pool(pool):
  """The module pool, checked afterwards to hold only its workers (outer + zygote each)."""
  yield pool
  pool.close_episodes(list(pool._live))
  # Processes outside the pool's workers are other fixtures' services (the session's GCS
  # emulator, when a test of this worker used it): not the pool's to account for.
  ours = set().union(*({w.proc.pid} | descendants(w.proc.pid) for w in pool._workers))
  others = descendants(os.getpid()) - ours
  left = settled_descendants(os.getpid(), 2 * len(pool._workers) + len(others)) - others
  assert len(left) == 2 * len(pool._workers), (
      f"leftover processes (state, parent, command): {describe(left)}; "
      f"workers: {[w.proc.pid for w in pool._workers]}")
