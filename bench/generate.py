"""Generation throughput: spade_jax.engine.generate vs transformers `generate`, same weights.

    .venv/bin/python bench/generate.py [--presets tiny,bench-40m] [--batches 1,8,32]

For each preset a random fp32 model is saved with hf_io and loaded by transformers, so both
sides run the same weights in the same process. Each side generates `--new-tokens` greedy
tokens after `--prompt-len`-token random prompts; tok/s counts generated tokens over the
whole call (prefill included), best of `--repeats` timed calls after one warm-up call.
Our first call's extra time over a timed call is reported as compile_s.
roofline_tok_s = batch * bandwidth / (parameter bytes + KV bytes of the live context per
step), with bandwidth measured here by summing a 512 MB array; roofline_frac = ours / it.
Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import jax
import numpy as np
import torch
import transformers
from flax import nnx

from spade_jax.engine.generate import generate
from spade_jax.model import Qwen3, get_preset
from spade_jax.model.hf_io import save_pretrained


def measure_bandwidth(mbytes: int = 512, repeats: int = 5) -> float:
  """Bytes/s of a streaming read (numpy sum over a float32 array)."""
  a = np.ones(mbytes * 2**20 // 4, np.float32)
  best = min(_timed(a.sum)[1] for _ in range(repeats))
  return a.nbytes / best


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def param_bytes(model: nnx.Module) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def kv_bytes_per_token(cfg) -> int:
  return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4


def bench_preset(name: str, batches: list[int], prompt_len: int, new: int, repeats: int,
                 bandwidth: float) -> dict:
  cfg = get_preset(name)
  model = Qwen3(cfg, rngs=nnx.Rngs(0))
  with tempfile.TemporaryDirectory() as d:
    save_pretrained(model, d)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
  rng = np.random.RandomState(0)
  out = {"params_m": round(param_bytes(model) / 4e6, 1)}
  for batch in batches:
    prompts = rng.randint(0, cfg.vocab_size, size=(batch, prompt_len))

    def ours(prompts=prompts, batch=batch):
      return generate(model, prompts.tolist(), new, temperature=0.0, max_slots=batch)

    def theirs(prompts=prompts):
      with torch.no_grad():
        ids = torch.tensor(prompts)
        return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=0,
                           eos_token_id=None)

    first = _timed(ours)[1]
    ours_s = min(_timed(ours)[1] for _ in range(repeats))
    _timed(theirs)
    theirs_s = min(_timed(theirs)[1] for _ in range(repeats))
    step_bytes = param_bytes(model) + batch * (prompt_len + new / 2) * kv_bytes_per_token(cfg)
    roofline = batch * bandwidth / step_bytes
    tok = batch * new
    print(f"{name} batch {batch}: ours {ours_s:.2f}s (first {first:.2f}s), "
          f"transformers {theirs_s:.2f}s", file=sys.stderr, flush=True)
    out[f"b{batch}"] = {
        "ours_tok_s": round(tok / ours_s, 1), "hf_tok_s": round(tok / theirs_s, 1),
        "ratio": round(theirs_s / ours_s, 2), "compile_s": round(first - ours_s, 2),
        "roofline_tok_s": round(roofline, 1), "roofline_frac": round(tok / ours_s / roofline, 3)}
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--presets", default="tiny,bench-40m")
  parser.add_argument("--batches", default="1,8,32")
  parser.add_argument("--prompt-len", type=int, default=64)
  parser.add_argument("--new-tokens", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
  args = parser.parse_args()
  torch.set_num_threads(args.threads)
  bandwidth = measure_bandwidth()
  result = {"bench": "generate", "backend": jax.default_backend(), "dtype": "float32",
            "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "bandwidth_gb_s": round(bandwidth / 1e9, 1)}
  batches = [int(b) for b in args.batches.split(",")]
  for name in args.presets.split(","):
    result[name] = bench_preset(name, batches, args.prompt_len, args.new_tokens, args.repeats,
                                bandwidth)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
