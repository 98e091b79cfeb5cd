"""GRPO update throughput against a transformers (PyTorch) training step on the same batch.

  .venv/bin/python bench/train_step.py [--iters 3] [--rounds 1] [--presets tiny,bench-40m]
                                       [--precisions float32,bfloat16]

Prints ONE JSON line. For each preset and precision, at batch 8 x 512 (a 64-token prompt,
then 448 policy tokens carrying loss), with fp32 parameters and AdamW state:
- "jax_tok_s": tokens/s of `Trainer.train_step` (forward + backward + AdamW, with the
  frozen reference policy's log-probs, beta = 0.05), warm; "jax_compile_s" separately;
  "jax_no_ref_tok_s": the same with beta = 0 (no reference forward), the like-for-like
  comparison with the transformers step, which has no reference model;
- "torch_tok_s": tokens/s of transformers' Qwen3ForCausalLM forward + backward (LM loss)
  + torch.optim.AdamW step, same weights and tokens (loaded from one checkpoint);
- "ratio" = jax / torch, and "jax_peak_rss_mb" / "torch_peak_rss_mb": each measured in its
  own subprocess (ru_maxrss), so the two do not share a high-water mark;
- "*_gflop_s": the matmul work each side sustains (dense presets; null for MoE): forward +
  backward is 3 forwards, and our step with the reference adds a fourth. A forward is 2
  FLOPs per matmul parameter per token, plus causal attention (2 x heads x head_dim x SEQ
  per layer: QK^T and PV over SEQ / 2 keys on average). The vocabulary matmul counts at
  the positions each side computes logits: transformers all SEQ, ours the loss positions
  (SEQ - PROMPT; `logprob_positions="loss"`).
Precision "float32" computes in fp32 on both sides. "bfloat16" is mixed precision on both
sides: our model with compute_dtype bfloat16 (matmuls read bf16 and accumulate in fp32),
transformers under `torch.autocast("cpu", dtype=torch.bfloat16)`.
Each figure is the best of `--iters` warm steps: on a shared machine the fastest step is
the one least disturbed by other load. `--rounds N` runs the two children alternately N
times and keeps each side's best, so a burst of outside load cannot land on one side
only. Goal (issue 5): ratio >= 1.0.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH, SEQ, PROMPT = 8, 512, 64
PRECISIONS = ("float32", "bfloat16")


def _tokens(vocab: int) -> np.ndarray:
  return np.random.default_rng(0).integers(0, vocab, (BATCH, SEQ)).astype(np.int32)


def _best_time(fn, iters: int) -> tuple[float, float]:
  """(first call seconds, fastest of `iters` further calls)."""
  t = time.perf_counter()
  fn()
  first = time.perf_counter() - t
  times = []
  for _ in range(iters):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return first, min(times)


def _peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_jax(checkpoint: str, iters: int, precision: str) -> dict:
  import jax

  from spade_jax.model.hf_io import from_pretrained
  from spade_jax.rl.batch import AGENT, TrainBatch
  from spade_jax.rl.trainer import Trainer

  model = from_pretrained(checkpoint, dtype="float32", compute_dtype=precision)
  tokens = _tokens(model.cfg.vocab_size)
  loss_mask = np.zeros((BATCH, SEQ), np.float32)
  loss_mask[:, PROMPT:] = 1
  rng = np.random.default_rng(1)
  batch = TrainBatch(tokens=tokens, attention_mask=np.ones((BATCH, SEQ), np.int32),
                     loss_mask=loss_mask,
                     behaviour_logprobs=(loss_mask * -10.0).astype(np.float32),
                     rewards=rng.random(BATCH).astype(np.float32),
                     group_ids=np.repeat(np.arange(BATCH // 4), 4).astype(np.int32),
                     roles=np.full(BATCH, AGENT, np.int32))

  out = {}
  for beta, key in ((0.05, "tok_s"), (0.0, "no_ref_tok_s")):
    trainer = Trainer(dict(learning_rate=1e-5, beta=beta, kl_estimator="k3"), model)

    def step(trainer=trainer):
      trainer.train_step(batch)  # returns host floats: the update has finished
      jax.block_until_ready(jax.tree.leaves(trainer.params))

    first, seconds = _best_time(step, iters)
    out[key] = BATCH * SEQ / seconds
    if beta:
      out.update(compile_s=first - seconds, peak_rss_mb=_peak_rss_mb())
  return out


def child_torch(checkpoint: str, iters: int, precision: str) -> dict:
  import torch
  import transformers

  torch.set_num_threads(os.cpu_count() or 1)
  model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
  model.train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
  ids = torch.from_numpy(_tokens(model.config.vocab_size).astype(np.int64))
  labels = ids.clone()
  labels[:, :PROMPT] = -100

  def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
      loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

  _, seconds = _best_time(step, iters)
  return {"tok_s": BATCH * SEQ / seconds, "peak_rss_mb": _peak_rss_mb()}


def _run_child(kind: str, checkpoint: str, iters: int, precision: str) -> dict:
  out = subprocess.run([sys.executable, __file__, "--child", kind, "--checkpoint", checkpoint,
                        "--iters", str(iters), "--precisions", precision],
                       capture_output=True, text=True, check=False, cwd=ROOT)
  if out.returncode:
    raise RuntimeError(f"{kind} child failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def _best(old: dict, new: dict) -> dict:
  """Merges two runs of a child: the higher throughputs and peak memory, the lower compile."""
  if not old:
    return new
  return {k: (min if k == "compile_s" else max)(old[k], new[k]) for k in new}


def _forward_flops_per_token(cfg, vocab_share: float) -> float | None:
  """Matmul FLOPs of one token's forward at length SEQ (see the module docstring), with
  logits at `vocab_share` of the positions."""
  if cfg.num_experts:
    return None
  d, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
  layer_params = 2 * d * q + 2 * d * kv + 3 * d * cfg.intermediate_size
  matmul_params = cfg.num_layers * layer_params + vocab_share * d * cfg.vocab_size
  return 2 * matmul_params + cfg.num_layers * 2 * q * SEQ


def _gflop_s(tok_s: float, forward_flops: float | None, forwards: int) -> float | None:
  """GFLOP/s at `tok_s` for a step of `forwards` forward-equivalents per token."""
  return None if forward_flops is None else round(tok_s * forwards * forward_flops / 1e9, 1)


def _compare(path: str, iters: int, rounds: int, precision: str,
             flops: tuple[float | None, float | None]) -> dict:
  """Both children at one precision, alternated `rounds` times; the figures of the pair."""
  jax_r, torch_r = {}, {}
  for _ in range(rounds):
    jax_r = _best(jax_r, _run_child("jax", path, iters, precision))
    torch_r = _best(torch_r, _run_child("torch", path, iters, precision))
  return {"jax_tok_s": round(jax_r["tok_s"], 1), "jax_compile_s": round(jax_r["compile_s"], 1),
          "jax_peak_rss_mb": round(jax_r["peak_rss_mb"]),
          "jax_no_ref_tok_s": round(jax_r["no_ref_tok_s"], 1),
          "torch_tok_s": round(torch_r["tok_s"], 1),
          "torch_peak_rss_mb": round(torch_r["peak_rss_mb"]),
          "ratio": round(jax_r["tok_s"] / torch_r["tok_s"], 3),
          "ratio_no_ref": round(jax_r["no_ref_tok_s"] / torch_r["tok_s"], 3),
          "jax_gflop_s": _gflop_s(jax_r["tok_s"], flops[0], 4),
          "jax_no_ref_gflop_s": _gflop_s(jax_r["no_ref_tok_s"], flops[0], 3),
          "torch_gflop_s": _gflop_s(torch_r["tok_s"], flops[1], 3)}


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--iters", type=int, default=3)
  parser.add_argument("--rounds", type=int, default=1)
  parser.add_argument("--presets", default="tiny,bench-40m")
  parser.add_argument("--precisions", default="float32,bfloat16")
  parser.add_argument("--child", choices=("jax", "torch"))
  parser.add_argument("--checkpoint")
  args = parser.parse_args()
  if args.child:
    fn = child_jax if args.child == "jax" else child_torch
    print(json.dumps(fn(args.checkpoint, args.iters, args.precisions)))
    return

  from flax import nnx

  from spade_jax.model import Qwen3, get_preset
  from spade_jax.model.hf_io import save_pretrained

  precisions = args.precisions.split(",")
  unknown = sorted(set(precisions) - set(PRECISIONS))
  if unknown:
    parser.error(f"--precisions {unknown}: expected names from {PRECISIONS}")
  result = {"batch": BATCH, "seq": SEQ, "param_dtype": "float32", "cpu_count": os.cpu_count(),
            "rounds": args.rounds}
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.presets.split(","):
      path = os.path.join(tmp, name)
      cfg = get_preset(name)
      save_pretrained(Qwen3(cfg, rngs=nnx.Rngs(0)), path)
      flops = (_forward_flops_per_token(cfg, (SEQ - PROMPT) / SEQ),  # ours, transformers
               _forward_flops_per_token(cfg, 1.0))
      result[name] = {p: _compare(path, args.iters, args.rounds, p, flops) for p in precisions}
  print(json.dumps(result))


if __name__ == "__main__":
  main()
