"""Prefill throughput against transformers, and host memory while loading a 0.6B checkpoint.

  .venv/bin/python bench/forward.py [--iters 5] [--skip-load]

Prints ONE JSON line:
- for the "tiny" and "bench-40m" presets: prefill tokens/s of spade_jax (fp32, jitted, warm,
  batch 8 x 256, all logits) and of transformers' Qwen3ForCausalLM on the same weights (both
  loaded from one random checkpoint written with transformers), their ratio, and the largest
  logit difference between the two;
- "load_0_6b": a random bf16 checkpoint shaped like Qwen3-0.6B is written to a temporary
  directory, then loaded by `from_pretrained` in a fresh subprocess; the peak host RSS growth
  (peak RSS minus the RSS after imports) is compared with the checkpoint's size on disk. Peak
  RSS is VmHWM: Linux carries ru_maxrss across fork + exec, so a child's ru_maxrss starts at
  its parent's size; the load also runs first, while this process is still small, so the two
  agree (both are reported).
Goals: ratio >= 1.0 and rss_over_size <= 1.3.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from spade_jax.model import Qwen3, get_preset, hf_config, hf_io, hf_safetensors  # noqa: E402

BATCH, SEQ = 8, 256

_LOAD_CHILD = """
import json, resource, sys, time
import jax
from spade_jax.model import hf_io
jax.devices()  # backend start-up belongs to the baseline
def status(field):
  with open("/proc/self/status") as f:
    return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))
base = status("VmRSS")
t = time.perf_counter()
model = hf_io.from_pretrained(sys.argv[1], dtype=None)
jax.block_until_ready(jax.tree.leaves(model))
seconds = time.perf_counter() - t
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_rss_growth": status("VmHWM") - base, "maxrss_growth": maxrss - base,
                  "load_s": seconds}))
"""


def _timeit(fn, iters: int) -> float:
  """Median seconds of `fn()` over `iters` runs after one warm-up run."""
  fn()
  times = []
  for _ in range(iters):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return float(np.median(times))


def bench_prefill(preset: str, iters: int, workdir: pathlib.Path) -> dict[str, float]:
  """tokens/s of spade_jax and transformers on one random checkpoint of `preset`'s shape."""
  cfg = get_preset(preset)
  hf = hf_config.config_to_hf(cfg, "float32")
  torch.manual_seed(0)
  theirs = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**hf)).eval()
  theirs.save_pretrained(workdir / preset)
  ours = hf_io.from_pretrained(workdir / preset, dtype="float32")
  ids = np.random.RandomState(0).randint(0, cfg.vocab_size, size=(BATCH, SEQ))
  forward = nnx.jit(lambda model, x: model(x))
  ids_jax = jax.device_put(ids)
  ours_s = _timeit(lambda: jax.block_until_ready(forward(ours, ids_jax)), iters)
  ids_torch = torch.tensor(ids)
  with torch.inference_mode():
    theirs_s = _timeit(lambda: theirs(ids_torch).logits, iters)
    diff = float(np.abs(np.asarray(forward(ours, ids_jax)) -
                        theirs(ids_torch).logits.numpy()).max())
  tokens = BATCH * SEQ
  return {"spade_jax_tok_s": round(tokens / ours_s, 1),
          "transformers_tok_s": round(tokens / theirs_s, 1),
          "ratio": round(theirs_s / ours_s, 3), "max_abs_logit_diff": diff}


def write_random_checkpoint(directory: pathlib.Path, preset: str = "qwen3-0.6b") -> int:
  """Random bf16 checkpoint of a preset's shape, written tensor by tensor; returns its bytes."""
  cfg = get_preset(preset, param_dtype="bfloat16", compute_dtype="bfloat16")
  abstract = dict(nnx.to_flat_state(nnx.state(
      nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0))))))
  rng = np.random.default_rng(0)
  pending = []
  for m in hf_io.tensor_maps(cfg):
    shape = tuple(abstract[m.param].shape)
    for name in m.hf_names():
      hf_shape = hf_io.hf_tensor_shape(shape[1:] if m.experts else shape, m.n_in)
      pending.append(hf_safetensors.PendingTensor(
          name, hf_shape, jnp.dtype("bfloat16"),
          lambda s=hf_shape: (0.02 * rng.standard_normal(s, np.float32)).astype(jnp.bfloat16)))
  directory.mkdir(parents=True, exist_ok=True)
  hf_safetensors.write_checkpoint(directory, pending, max_shard_bytes=4 << 30)
  hf_config.write_json(directory / "config.json", hf_config.config_to_hf(cfg, "bfloat16"))
  return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


def bench_load(workdir: pathlib.Path) -> dict[str, float]:
  directory = workdir / "qwen3-0.6b"
  size = write_random_checkpoint(directory)
  out = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(directory)], check=True,
                       capture_output=True, text=True,
                       cwd=pathlib.Path(__file__).resolve().parents[1])
  child = json.loads(out.stdout.strip().splitlines()[-1])
  return {"checkpoint_bytes": size, "peak_rss_growth_bytes": child["peak_rss_growth"],
          "ru_maxrss_growth_bytes": child["maxrss_growth"],
          "rss_over_size": round(child["peak_rss_growth"] / size, 3),
          "load_s": round(child["load_s"], 2)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--iters", type=int, default=5)
  parser.add_argument("--skip-load", action="store_true")
  args = parser.parse_args()
  result: dict[str, object] = {"bench": "forward", "batch": BATCH, "seq": SEQ, "dtype": "float32"}
  with tempfile.TemporaryDirectory() as tmp:
    workdir = pathlib.Path(tmp)
    if not args.skip_load:
      result["load_0_6b"] = bench_load(workdir)
    for preset in ("tiny", "bench-40m"):
      result[preset] = bench_prefill(preset, args.iters, workdir)
  result["goals_met"] = all(
      [result[p]["ratio"] >= 1.0 for p in ("tiny", "bench-40m")]  # type: ignore[index]
      + ([] if args.skip_load else [result["load_0_6b"]["rss_over_size"] <= 1.3]))  # type: ignore[index]
  print(json.dumps(result))


if __name__ == "__main__":
  main()
