"""The accelerator benchmark: decode, prefill, a GRPO step and the rollout workload on a GPU / TPU.

    python bench/accelerator.py [--presets qwen3-0.6b,qwen3-1.7b] [--parts decode,grpo,rollout]

Random-weight Qwen3 shapes (`--presets`), bfloat16 weights for inference. Measured first:
- copy bandwidth: a jitted `x + 1` over a 1 GiB float32 array (read + write) -> bytes/s;
- bf16 matmul peak: a chain of 8192^3 bf16 matmuls in one jit -> FLOP/s.
Parts (`--parts`; each preset runs every part):
- decode: the slot engine's own calls (JetStream's prefill / insert / generate), greedy, on
  512-token random prompts at batch 1, 64 and 256: prefill_tok_s = batch * 512 / (time of the
  prefill call); decode_tok_s = tokens decoded / (time of one generate block of 255 steps),
  the insert between them untimed; best of 2 passes after a compiling one. Each rate has
  its own timer (a difference of two timings went negative in noise). The HBM roofline of a
  decode step reads the weights plus the live KV of every row (prompt + half the new
  tokens on average) once: roofline_tok_s = batch * bandwidth / step bytes, and
  roofline_frac = decode_tok_s / roofline_tok_s.
- grpo: one `Trainer.train_step` (batch 32 x 2048: a 512-token prompt, 1536 loss tokens,
  beta 0.05 so the frozen reference runs too, micro-batches of 8, fp32 master weights and
  AdamW state, bf16 compute), warm (best of 2 after the compiling step). Model FLOPs: a
  forward is 2 per matmul parameter per token, plus causal attention (2 x heads x head_dim
  x T per layer), plus the vocabulary matmul at the loss positions; the step is 3 forwards
  (forward + backward) for the policy and 1 for the reference; rematerialisation is not
  counted. mfu_frac = model FLOP/s / the measured matmul peak.
- rollout: bench/rollout.py's multi-turn workload, `--rollout-scale` times over (episodes
  and designer requests drawn with seeds 0..scale-1), through one SlotConversationEngine
  with `--rollout-slots` slots; a warm-up pass with scale 1 compiles first. Reported with
  the decode_tok_s of the same preset at batch 256 (same batch as the slots by default):
  rollout_vs_decode_frac.
Prints ONE JSON line; every figure's key ends in its unit (see "units" in the output). A
part that raises is reported as {"error": ...} in its place (traceback on stderr, exit
status 1) and the other parts still run; `--partial FILE` is rewritten after every part.
On a CPU backend it exits at once with a one-line refusal (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import rollout  # noqa: E402  (bench/rollout.py: the multi-turn workload and its driver)

from spade_jax.engine.api import SamplingParams  # noqa: E402
from spade_jax.engine.conversation import SlotConversationEngine  # noqa: E402
from spade_jax.engine.slot_engine import SlotEngine  # noqa: E402
from spade_jax.model import Qwen3, create_sharded, get_preset  # noqa: E402
from spade_jax.rl.batch import AGENT, TrainBatch  # noqa: E402
from spade_jax.rl.trainer import Trainer  # noqa: E402

PROMPT_LEN, NEW_TOKENS, DECODE_BATCHES = 512, 256, (1, 64, 256)
GRPO_BATCH, GRPO_SEQ, GRPO_PROMPT, GRPO_MICRO = 32, 2048, 512, 8
UNITS = {"_tok_s": "tokens per second", "_s": "seconds", "_gb_s": "1e9 bytes per second",
         "_tflop_s": "1e12 FLOP per second", "_frac": "fraction (0-1)", "_gb": "1e9 bytes",
         "_count": "count"}
REFUSAL = ("bench/accelerator.py needs a GPU or TPU; jax's backend here is 'cpu' "
           "(run bench/generate.py, bench/train_step.py or bench/rollout.py on CPU)")


# ---- arithmetic (tested on CPU: tests/bench/test_accelerator_bench.py) ----

def kv_bytes_per_token(cfg, dtype_bytes: int) -> int:
  """Bytes of keys and values one token holds in the cache, over all layers."""
  return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * dtype_bytes


def decode_step_bytes(cfg, param_bytes: int, batch: int, context: float,
                      dtype_bytes: int) -> float:
  """HBM bytes one decode step must read: every weight once, each row's live KV."""
  return param_bytes + batch * context * kv_bytes_per_token(cfg, dtype_bytes)


def roofline_tok_s(step_bytes: float, batch: int, bandwidth: float) -> float:
  """Tokens/s if a decode step took exactly its bytes over the bandwidth."""
  return batch * bandwidth / step_bytes


def matmul_params_per_token(cfg) -> int:
  """Parameters a token multiplies by in the decoder layers (MoE: the routed experts only)."""
  d, hd = cfg.hidden_size, cfg.head_dim
  attention = d * hd * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)  # q, o; k, v
  total = 0
  for layer in range(cfg.num_layers):
    if cfg.is_moe_layer(layer):
      mlp = 3 * d * cfg.moe_intermediate_size * cfg.num_experts_per_tok + d * cfg.num_experts
    else:
      mlp = 3 * d * cfg.intermediate_size
    total += attention + mlp
  return total


def forward_flops(cfg, rows: int, seq: int, logit_positions: int) -> float:
  """Model FLOPs of one causal forward over rows x seq tokens, logits at logit_positions
  per row."""
  tokens = rows * seq
  attention = 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq  # per token, causal
  vocab = 2 * cfg.hidden_size * cfg.vocab_size * rows * logit_positions
  return tokens * (2 * matmul_params_per_token(cfg) + attention) + vocab


def grpo_step_flops(cfg, rows: int, seq: int, loss_positions: int, with_reference: bool) -> float:
  """Forward + backward (3 forwards) for the policy, plus a reference forward."""
  one = forward_flops(cfg, rows, seq, loss_positions)
  return (4 if with_reference else 3) * one


def mfu(flops: float, seconds: float, peak_flop_s: float) -> float:
  return flops / seconds / peak_flop_s


# ---- measurements ----

def _best(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return min(times)


def copy_bandwidth(nbytes: int = 2**30) -> float:
  """Bytes/s of a jitted elementwise pass over an `nbytes` float32 array (each byte read once
  and written once)."""
  x = jnp.ones((nbytes // 4,), jnp.float32)
  fn = jax.jit(lambda a: a + 1.0)
  jax.block_until_ready(fn(x))
  return 2 * x.nbytes / _best(lambda: fn(x), 5)


def matmul_peak(n: int = 8192, chain: int = 10) -> float:
  """FLOP/s of `chain` dependent bf16 [n, n] matmuls (fp32 accumulation) in one jit."""
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = (jax.random.normal(key_a, (n, n), jnp.float32) / np.sqrt(n)).astype(jnp.bfloat16)
  b = jax.random.normal(key_b, (n, n), jnp.bfloat16)

  @jax.jit
  def run(a, b):
    step = lambda _, c: jnp.dot(a, c, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    return jax.lax.fori_loop(0, chain, step, b)

  jax.block_until_ready(run(a, b))
  return chain * 2 * n**3 / _best(lambda: run(a, b), 3)


def _model(preset: str, param_dtype: str):
  cfg = get_preset(preset, param_dtype=param_dtype, compute_dtype="bfloat16")
  return create_sharded(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)))


def _param_bytes(model) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def _decode_engine(model, batch: int) -> SlotEngine:
  """A slot engine sized for one decode measurement: `batch` slots, one prompt bucket, and one
  generate block of all NEW_TOKENS - 1 steps after the prefill's first token."""
  return SlotEngine(model, num_slots=batch, max_cache_len=PROMPT_LEN + NEW_TOKENS,
                    prefill_buckets=(PROMPT_LEN,), decode_steps=NEW_TOKENS - 1)


def _decode_pass(engine: SlotEngine, prompts: list[list[int]]) -> tuple[float, float, int]:
  """(prefill seconds, decode seconds, tokens decoded) of one pass: every prompt prefilled,
  inserted into a state already holding the whole reply (untimed), one generate block."""
  batch = len(prompts)
  params = [SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0)] * batch
  state = engine.reserve(engine.init_decode_state(), batch, PROMPT_LEN + NEW_TOKENS)
  start = time.perf_counter()
  prefix = jax.block_until_ready(engine.prefill(engine.params, prompts, params,
                                                [NEW_TOKENS] * batch))
  prefill_s = time.perf_counter() - start
  state = jax.block_until_ready(engine.insert(prefix, state, range(batch)))
  start = time.perf_counter()
  _, block = engine.generate(engine.params, state, np.ones((batch,), bool), PROMPT_LEN)
  return prefill_s, time.perf_counter() - start, int(block.valid.sum())


def bench_decode(preset: str, bandwidth: float) -> dict:
  model = _model(preset, "bfloat16")
  cfg, weights = model.cfg, _param_bytes(model)
  rng = np.random.default_rng(0)
  out = {"param_gb": round(weights / 1e9, 3)}
  for batch in DECODE_BATCHES:
    prompts = rng.integers(0, cfg.vocab_size, (batch, PROMPT_LEN)).tolist()
    engine = _decode_engine(model, batch)
    start = time.perf_counter()
    _decode_pass(engine, prompts)
    compile_s = time.perf_counter() - start
    passes = [_decode_pass(engine, prompts) for _ in range(2)]
    prefill_s = min(p[0] for p in passes)
    decode_tok_s = max(tokens / decode_s for _, decode_s, tokens in passes)
    step = decode_step_bytes(cfg, weights, batch, PROMPT_LEN + NEW_TOKENS / 2, 2)
    roof = roofline_tok_s(step, batch, bandwidth)
    out[f"b{batch}"] = {
        "prefill_tok_s": round(batch * PROMPT_LEN / prefill_s, 1),
        "decode_tok_s": round(decode_tok_s, 1), "roofline_tok_s": round(roof, 1),
        "roofline_frac": round(decode_tok_s / roof, 3), "first_calls_s": round(compile_s, 1)}
    print(f"{preset} decode b{batch}: {out[f'b{batch}']}", file=sys.stderr, flush=True)
  return out


def bench_grpo(preset: str, peak: float) -> dict:
  model = _model(preset, "float32")
  cfg = model.cfg
  rng = np.random.default_rng(0)
  rows, seq = GRPO_BATCH, GRPO_SEQ
  loss = np.zeros((rows, seq), np.float32)
  loss[:, GRPO_PROMPT:] = 1
  batch = TrainBatch(rng.integers(0, cfg.vocab_size, (rows, seq)).astype(np.int32),
                     np.ones((rows, seq), np.int32), loss,
                     np.where(loss > 0, -11.9, 0).astype(np.float32),
                     rng.random(rows).astype(np.float32),
                     np.arange(rows, dtype=np.int32) // 8, np.full((rows,), AGENT, np.int32))
  trainer = Trainer(dict(beta=0.05, micro_batch_size=GRPO_MICRO, learning_rate=1e-6), model)
  start = time.perf_counter()
  trainer.train_step(batch)
  first_s = time.perf_counter() - start
  step_s = _best(lambda: trainer.train_step(batch), 2)
  flops = grpo_step_flops(cfg, rows, seq, seq - GRPO_PROMPT, with_reference=True)
  out = {"step_s": round(step_s, 3), "first_step_s": round(first_s, 1),
         "tok_s": round(rows * seq / step_s, 1), "model_tflop_s": round(flops / step_s / 1e12, 1),
         "mfu_frac": round(mfu(flops, step_s, peak), 3)}
  print(f"{preset} grpo: {out}", file=sys.stderr, flush=True)
  return out


def bench_rollout(preset: str, scale: int, slots: int) -> dict:
  model = _model(preset, "bfloat16")

  def workload(n):
    parts = [rollout.make_workload(model.cfg.vocab_size, seed) for seed in range(n)]
    return [d for _, ds in parts for d in ds] + [e for es, _ in parts for e in es]

  def run(jobs):
    engine = SlotConversationEngine(model, num_slots=slots, max_cache_len=2048,
                                    prefill_buckets=(32, 64, 96, 128), decode_steps_per_poll=8)
    start = time.perf_counter()
    tokens = rollout.run_ours(engine, jobs)
    return tokens, time.perf_counter() - start

  warm_tokens, warm_s = run(workload(1))
  jobs = workload(scale)
  tokens, seconds = run(jobs)
  out = {"requests_count": len(jobs), "num_slots_count": slots, "tokens_count": tokens,
         "rollout_s": round(seconds, 2), "rollout_tok_s": round(tokens / seconds, 1),
         "warmup_s": round(warm_s, 1), "warmup_tokens_count": warm_tokens}
  print(f"{preset} rollout: {out}", file=sys.stderr, flush=True)
  return out


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--presets", default="qwen3-0.6b,qwen3-1.7b")
  parser.add_argument("--parts", default="decode,grpo,rollout",
                      help="comma-separated subset of decode, grpo, rollout")
  parser.add_argument("--rollout-scale", type=int, default=4,
                      help="copies of bench/rollout.py's workload (4: 192 episodes + 32 designer)")
  parser.add_argument("--rollout-slots", type=int, default=256)
  parser.add_argument("--partial", help="file rewritten with the results so far after each part")
  args = parser.parse_args(argv)
  if jax.default_backend() == "cpu":
    print(REFUSAL, file=sys.stderr)
    return 2
  parts = args.parts.split(",")
  unknown = sorted(set(parts) - {"decode", "grpo", "rollout"})
  if unknown:
    parser.error(f"--parts: unknown {unknown}; expected a subset of decode,grpo,rollout")
  bandwidth, peak = copy_bandwidth(), matmul_peak()
  result = {"bench": "accelerator", "backend": jax.default_backend(),
            "device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1),
            "bf16_matmul_peak_tflop_s": round(peak / 1e12, 1), "units": UNITS}
  failed = False
  for preset in args.presets.split(","):
    entry = result[preset] = {}
    for part in ("decode", "grpo", "rollout"):
      if part not in parts:
        continue
      try:  # a failing part is reported in the JSON; the other parts still run
        entry[part] = _run_part(part, preset, args, bandwidth, peak)
      except Exception as err:  # pylint: disable=broad-except
        failed = True
        entry[part] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        traceback.print_exc()
      _write_partial(args.partial, result)
    same_batch = entry.get("decode", {}).get(f"b{args.rollout_slots}")
    if same_batch and "rollout_tok_s" in entry.get("rollout", {}):
      entry["rollout"]["rollout_vs_decode_frac"] = round(
          entry["rollout"]["rollout_tok_s"] / same_batch["decode_tok_s"], 3)
  print(json.dumps(result))
  return 1 if failed else 0


def _run_part(part: str, preset: str, args, bandwidth: float, peak: float) -> dict:
  if part == "decode":
    return bench_decode(preset, bandwidth)
  if part == "grpo":
    return bench_grpo(preset, peak)
  return bench_rollout(preset, args.rollout_scale, args.rollout_slots)


def _write_partial(path: str | None, result: dict) -> None:
  """The results so far, rewritten after every part: a run cut off by its time limit still
  leaves the finished parts."""
  if path:
    pathlib.Path(path).write_text(json.dumps(result) + "\n")

if __name__ == "__main__":
  sys.exit(main())
