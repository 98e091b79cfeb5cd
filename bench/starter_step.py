"""Tokens/s of the starter build's supervised step (proj/starter/lm_step.py), warm.

  .venv/bin/python bench/starter_step.py [--preset starter] [--iters 3]
                                         [--precisions float32,bfloat16]

Two shapes, the build's own (starter size, build.SIZES): pretraining [8 x 1024] with the loss
on every position; fine-tuning [4 x 4096] with the loss on the last 30 % of each row (a
designer reply after its prompt; logits only there). Random tokens, AdamW step included. One
JSON line per precision: loss tokens/s (wall clock, and from CPU seconds / cores: the rate
with the machine to itself) and compile seconds of each shape, and what the build's
pretraining token count takes at the wall-clock rate.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np
from flax import nnx

from proj.starter.batches import BucketPlan, WindowPlan
from proj.starter.build import SIZES
from proj.starter.lm_step import compile_lm_step
from spade_jax.model import get_preset
from spade_jax.model.testing import random_model
from spade_jax.rl.optim import make_optimizer


def _rate(cfg, plan, iters: int) -> tuple[float, float, float]:
  model = random_model(cfg)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  tx = make_optimizer(SIZES["starter"].pretrain.optimizer_config())
  step, init, _ = compile_lm_step(graphdef, tx, None, params, rest, chunk=128)
  opt_state = init(params)
  batch = plan.batch(0)
  tokens = int(np.count_nonzero(batch["weights"]))
  began = time.perf_counter()
  params, opt_state, m = step(params, opt_state, rest, batch)
  jax.block_until_ready(m)
  compile_s = time.perf_counter() - began
  began, cpu = time.perf_counter(), time.process_time()
  for _ in range(iters):
    params, opt_state, m = step(params, opt_state, rest, batch)
  jax.block_until_ready(m)
  wall, cpu = time.perf_counter() - began, time.process_time() - cpu
  # On a shared machine the wall clock counts other jobs' time; CPU seconds / cores is what
  # the step would take with the cores to itself (an upper bound on its speed).
  return tokens * iters / wall, compile_s, tokens * iters / (cpu / os.cpu_count())


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--preset", default="starter")
  parser.add_argument("--iters", type=int, default=3)
  parser.add_argument("--precisions", default="float32,bfloat16")
  args = parser.parse_args()
  size = SIZES["starter"]
  rng = np.random.default_rng(0)
  for precision in args.precisions.split(","):
    cfg = get_preset(args.preset, compute_dtype=precision)
    stream = rng.integers(0, cfg.vocab_size, size.window * size.pretrain_rows * 2)
    pre = WindowPlan.from_documents([stream], 0, size.window, size.pretrain_rows)
    length = 4096
    mask = (np.arange(length) >= int(0.7 * length)).astype(int)
    sft = BucketPlan.build([(rng.integers(0, cfg.vocab_size, length), mask)] * 4,
                           max_length=length, tokens_per_step=4 * length, chunk=128)
    pre_rate, pre_compile, pre_own = _rate(cfg, pre, args.iters)
    sft_rate, sft_compile, sft_own = _rate(cfg, sft, args.iters)
    pre_tokens = size.pretrain.num_steps * pre.tokens_per_step()
    print(json.dumps({
        "preset": args.preset, "precision": precision, "cpu_devices": jax.device_count(),
        "pretrain_shape": [size.pretrain_rows, size.window], "pretrain_tok_s": round(pre_rate),
        "pretrain_compile_s": round(pre_compile, 1),
        "sft_shape": [4, length], "sft_loss_tok_s": round(sft_rate),
        "sft_compile_s": round(sft_compile, 1),
        "pretrain_tok_s_cores_to_itself": round(pre_own), "sft_loss_tok_s_cores_to_itself":
        round(sft_own), "load_average_1m": round(os.getloadavg()[0], 1),
        "pretrain_tokens_planned": pre_tokens,
        "pretrain_minutes_planned": round(pre_tokens / pre_rate / 60, 1),
        "sft_loss_tokens_in_30_min": round(sft_rate * 1800)}), flush=True)


if __name__ == "__main__":
  main()
