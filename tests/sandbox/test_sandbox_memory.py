"""The aggregate memory cap on a host without cgroups: episodes each under their own memory
limit, over the pool's budget together, lose the largest of them and nothing else.

The pool is built as a cgroup-v2-only host builds it (no cgroup v1 controllers), so only the
host-side cap (memcap.py) stands between the episodes and the host's memory. The hostile
environment `Hog` holds `seed` MiB of anonymous memory from its reset on (and takes `seed` / 100
seconds to answer, so the largest is still in its call when the cap must act); its benign twin
is the same class holding a little.
"""

import dataclasses
import time

import pytest

from spade_jax.sandbox import contract, isolation
from spade_jax.sandbox.pool import SandboxPool

BUDGET_MB = 350  # six hogs of 100 MiB: three fit (each also holds a few MiB of interpreter)

HOG = """
import time

class Hog:
  def reset(self, seed=None):
    self.held = "x" * (seed << 20)  # written, so resident
    time.sleep(seed / 100)
    return f"holding {seed} MiB", {}

  def step(self, action):
    return "done", 1.0, True, False, {}
"""


@pytest.fixture(scope="module")
def capped_pool():
  layers = dataclasses.replace(isolation.detect_layers(), cgroup_v1=())
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(isolation, "detect_layers", lambda: layers)
    pool = SandboxPool(num_workers=2, reset_timeout_s=5.0, step_timeout_s=2.0,
                       episodes_memory_mb=BUDGET_MB)
  with pool:
    assert pool.setup["cgroups"] == ()
    yield pool


def play(pool, sizes_mb: list[int]) -> tuple[list, list]:
  """Resets one Hog per size, then steps the ones that are live: (reset records, steps)."""
  resets = pool.reset([(i, HOG, mb) for i, mb in enumerate(sizes_mb)])
  live = [i for i, record in enumerate(resets) if record.error_kind is None]
  steps = dict(zip(live, pool.step([(i, "go") for i in live]), strict=True))
  return resets, [steps.get(i) for i in range(len(sizes_mb))]


def killed(resets: list) -> list[int]:
  out = [i for i, r in enumerate(resets) if r.error_kind is not None]
  for i in out:
    assert resets[i].error_kind == "crash", resets[i]
    assert "aggregate memory cap" in resets[i].error_detail, resets[i]
  return out


def test_the_largest_episodes_over_the_budget_are_killed_alone(capped_pool):
  # One hog far over its share beside four siblings under theirs: only the hog goes, killed
  # during its call (which would take 3 s), not after it.
  start = time.monotonic()
  resets, steps = play(capped_pool, [300, 20, 20, 20, 20])
  assert time.monotonic() - start < 2.0
  assert killed(resets) == [0]
  assert [s.reward for s in steps[1:]] == [1.0] * 4, steps
  # Six equal hogs, together well over the budget: just enough of them go for the rest to fit.
  resets, steps = play(capped_pool, [100] * 6)
  assert len(killed(resets)) == 3, resets
  assert sorted(s.reward for s in steps if s is not None) == [1.0] * 3, steps
  # The benign twin (the same episodes holding little), then validation, on the same pool.
  resets, steps = play(capped_pool, [10] * 6)
  assert [(r.error_kind, s.reward) for r, s in zip(resets, steps, strict=True)] == [(None, 1.0)] * 6
  assert capped_pool.validate([contract.EXAMPLE_ENV])[0].valid
