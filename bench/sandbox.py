"""Sandbox pool benchmark; prints ONE JSON line.

  .venv/bin/python bench/sandbox.py [--steps 2000]

Figures: per-step round-trip latency (median, p99, microseconds) through the pool with 1
and 2 workers against calling the same environment in-process; episodes/s for a batch of
48 short episodes (reset + 4 steps each); validation time per environment (one at a
time and in a batch of 8); one check of the aggregate memory cap over 64 live episodes
under its budget (what the pool adds to each batch and poll round). Goals: median
overhead < 100 us a step, validation < 50 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from spade_jax.sandbox import contract, runner
from spade_jax.sandbox.pool import SandboxPool

ENV = """
import random

class Walk:
  max_turns = 64

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.pos = self.rng.randint(0, 9)
    return f"You are at {self.pos}. Say left or right.", {}

  def step(self, action):
    self.pos += 1 if action == "right" else -1
    return f"You are at {self.pos}.", 0.0, False, False, {"pos": self.pos}
"""
SHORT = ENV.replace("max_turns = 64", "max_turns = 4").replace("0.0, False", "0.25, False")


def _stats(seconds: list[float]) -> dict:
  ordered = sorted(seconds)
  return {"median_us": round(statistics.median(ordered) * 1e6, 1),
          "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))] * 1e6, 1)}


def in_process(steps: int) -> dict:
  env = runner.load_class(ENV, "Walk")()
  env.reset(0)
  times = []
  for i in range(steps):
    start = time.perf_counter()
    env.step("right" if i % 2 else "left")
    times.append(time.perf_counter() - start)
  return _stats(times)


def through_pool(pool: SandboxPool, n_episodes: int, steps: int) -> dict:
  """Latency of one batched step call over `n_episodes` episodes (one per worker)."""
  ids = list(range(n_episodes))
  pool.reset([(i, ENV, i) for i in ids])
  times = []
  for i in range(steps):
    batch = [(e, "right" if i % 2 else "left") for e in ids]
    start = time.perf_counter()
    records = pool.step(batch)
    times.append(time.perf_counter() - start)
    if records[0].done:
      pool.reset([(e, ENV, i) for e in ids])
  pool.close_episodes(ids)
  return _stats(times)


def episodes_per_second(pool: SandboxPool, n: int = 48) -> float:
  start = time.perf_counter()
  records = pool.reset([(i, SHORT, i) for i in range(n)])
  live = [i for i, r in enumerate(records) if not r.done]
  while live:
    records = pool.step([(i, "right") for i in live])
    live = [i for i, r in zip(live, records, strict=True) if not r.done]
  return round(n / (time.perf_counter() - start), 1)


def validation_ms(pool: SandboxPool, batch: int, repeats: int = 5) -> float:
  start = time.perf_counter()
  for _ in range(repeats):
    results = pool.validate([contract.EXAMPLE_ENV] * batch)
    assert all(r.valid for r in results), results
  return round((time.perf_counter() - start) / (repeats * batch) * 1e3, 2)


def memory_check_us(pool: SandboxPool, n: int = 64, repeats: int = 200) -> float:
  ids = list(range(n))
  pool.reset([(i, ENV, i) for i in ids])
  probes = [proc.memory for proc in pool._live.values()]
  start = time.perf_counter()
  for _ in range(repeats):
    assert not pool.memory_cap.over_budget(probes)
  pool.close_episodes(ids)
  return round((time.perf_counter() - start) / repeats * 1e6, 1)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=2000)
  args = parser.parse_args()
  out = {"in_process": in_process(args.steps)}
  for workers in (1, 2):
    with SandboxPool(num_workers=workers) as pool:
      out[f"pool_{workers}w"] = through_pool(pool, workers, args.steps)
      if workers == 2:
        out["episodes_per_s_48x4"] = episodes_per_second(pool)
        out["validation_ms_per_env"] = validation_ms(pool, 1)
        out["validation_ms_per_env_batch8"] = validation_ms(pool, 8)
        out["memory_check_us_64_live"] = memory_check_us(pool)
  out["overhead_median_us_1w"] = round(
      out["pool_1w"]["median_us"] - out["in_process"]["median_us"], 1)
  out["layers"] = pool.layers.describe()
  print(json.dumps(out))


if __name__ == "__main__":
  main()
