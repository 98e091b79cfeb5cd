"""Decoding with LoRA: adapters applied on the fly against merged into the kernels.

    .venv/bin/python bench/lora_decode.py [--preset bench-40m] [--rank 16] [--batches 1,8]

A random fp32 model of the preset with rank-`--rank` adapters on every projection (B drawn
non-zero, as after training) generates `--new-tokens` greedy tokens after random
`--prompt-len`-token prompts through spade_jax.engine.generate, once with the adapters on
the fly (what the engine does: the trainer's live parameters, no copy) and once from
`lora_io.merged(model)` (W + scale A B folded in, what a merge after every update would
sample from). "merge_s" is the merge itself, paid once per update. tok/s: best of
`--repeats` timed calls after a warm-up call. Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.engine.generate import generate
from spade_jax.model import Qwen3, get_preset
from spade_jax.model.lora import LoRAParam
from spade_jax.model.lora_io import merged


def _best(fn, repeats: int) -> float:
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", default="bench-40m")
  parser.add_argument("--rank", type=int, default=16)
  parser.add_argument("--batches", default="1,8")
  parser.add_argument("--prompt-len", type=int, default=64)
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  cfg = get_preset(args.preset, lora_rank=args.rank, lora_alpha=2.0 * args.rank)
  model = Qwen3(cfg, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  nnx.update(model, jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.01, x.shape), x.dtype),
                                 nnx.state(model, LoRAParam)))
  merge_s = _best(lambda: jax.block_until_ready(nnx.state(merged(model))), args.repeats)
  plain = merged(model)
  result = {"bench": "lora_decode", "preset": args.preset, "rank": args.rank,
            "backend": jax.default_backend(), "new_tokens": args.new_tokens,
            "merge_s": round(merge_s, 3)}
  for batch in (int(b) for b in args.batches.split(",")):
    prompts = rng.integers(0, cfg.vocab_size, (batch, args.prompt_len)).tolist()
    tok = batch * args.new_tokens
    for name, m in (("on_the_fly", model), ("merged", plain)):
      seconds = _best(lambda m=m, p=prompts, b=batch: generate(m, p, args.new_tokens,
                                                               temperature=0.0, max_slots=b),
                      args.repeats)
      result[f"b{batch}_{name}_tok_s"] = round(tok / seconds, 1)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
