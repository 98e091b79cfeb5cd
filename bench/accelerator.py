"""The accelerator benchmark: decode, prefill, a GRPO step and the rollout workload on a GPU / TPU.

    python bench/accelerator.py [--presets qwen3-0.6b,qwen3-1.7b] [--parts decode,grpo,rollout]

Random-weight Qwen3 shapes (`--presets`), bfloat16 weights for inference. Every part runs on a
mesh over all of `jax.devices()` (`--mesh`, default FSDP over every chip: `fsdp=-1`), its
parameters, KV cache and optimiser state sharded by the model's logical axes; batch rows
(decode batches, GRPO micro-batches, rollout slots) are rounded up to multiples of the mesh's
batch shards (a row short of them would be computed on every chip anyway). Measured first,
on one chip (every chip of a slice is alike; the rooflines and MFU below scale them by the
chip count):
- copy bandwidth: a jitted `x + 1` over a 1 GiB float32 array (read + write) -> bytes/s;
- bf16 matmul peak: a chain of 8192^3 bf16 matmuls in one jit -> FLOP/s.
Sized to the chip's HBM (`--hbm-gib`, else the device's own `bytes_limit`, else
spade_jax.tpu_aot.SLICES' figure for its kind): before a part allocates anything at a size,
its programs are compiled on abstract arrays and their per-chip peak (arguments + outputs
not aliased + temporaries) must be at most 90% of HBM (a program XLA's TPU compiler refuses
for HBM does not fit either: it needs what the compiler says). A decode batch that does not
fit is reported as {"skipped": "needs X GiB of Y GiB per chip"}; GRPO shrinks its
micro-batch and rollout its slots (halving, down to the batch shards) before it is skipped.
The sizing compiles each program once more than the run itself does.
Parts (`--parts`; each preset runs every part):
- decode: the slot engine's own calls (JetStream's prefill / insert / generate), greedy, on
  512-token random prompts at batch 1, 64 and 256: prefill_tok_s = batch * 512 / (time of the
  prefill call); decode_tok_s = tokens decoded / (time of one generate block of 255 steps),
  the insert between them untimed; best of 2 passes after a compiling one. Each rate has
  its own timer (a difference of two timings went negative in noise). The HBM roofline of a
  decode step reads the weights plus the live KV of every row (prompt + half the new
  tokens on average) once, spread over the chips: roofline_tok_s = batch * chips *
  bandwidth / step bytes, and roofline_frac = decode_tok_s / roofline_tok_s.
- grpo: one `Trainer.train_step` (batch 32 x 2048: a 512-token prompt, 1536 loss tokens,
  beta 0.05 so the frozen reference runs too, micro-batches of 8, fp32 master weights and
  AdamW state, bf16 compute), warm (best of 2 after the compiling step). Model FLOPs: a
  forward is 2 per matmul parameter per token, plus causal attention (2 x heads x head_dim
  x T per layer), plus the vocabulary matmul at the loss positions; the step is 3 forwards
  (forward + backward) for the policy and 1 for the reference; rematerialisation is not
  counted. mfu_frac = model FLOP/s / (chips * the measured matmul peak).
- rollout: bench/rollout.py's multi-turn workload, `--rollout-scale` times over (episodes
  and designer requests drawn with seeds 0..scale-1), through one SlotConversationEngine
  with `--rollout-slots` slots; a warm-up pass with scale 1 compiles first. Reported with
  the decode_tok_s of the same preset at the batch of its slots (256 by default):
  rollout_vs_decode_frac.
Prints ONE JSON line; every figure's key ends in its unit (see "units" in the output). A
part that raises is reported as {"error": ...} in its place (traceback on stderr, exit
status 1) and the other parts still run; `--partial FILE` is rewritten after every part.
On a CPU backend it exits at once with a one-line refusal (exit status 2). The script imports
only the runtime requirements (requirements.txt + jax[tpu], as docs/launch.md installs a TPU
VM): no torch or transformers.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import pathlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import rollout  # noqa: E402  (bench/rollout.py: the multi-turn workload)

from spade_jax import tpu_aot  # noqa: E402
from spade_jax.engine import slot_engine  # noqa: E402
from spade_jax.engine.api import SamplingParams  # noqa: E402
from spade_jax.engine.conversation import SlotConversationEngine  # noqa: E402
from spade_jax.engine.slot_engine import SlotEngine  # noqa: E402
from spade_jax.engine.state import SlotParams, init_decode_state, pick_bucket  # noqa: E402
from spade_jax.engine.state import state_shardings as decode_state_shardings  # noqa: E402
from spade_jax.engine.workload import play  # noqa: E402
from spade_jax.model import Qwen3, create_sharded, get_preset, make_mesh  # noqa: E402
from spade_jax.model.config import ModelConfig  # noqa: E402
from spade_jax.model.sharding import MESH_AXES, abstract_sharded, batch_shards  # noqa: E402
from spade_jax.rl.batch import AGENT, TrainBatch  # noqa: E402
from spade_jax.rl.trainer import Trainer  # noqa: E402

PROMPT_LEN, NEW_TOKENS, DECODE_BATCHES = 512, 256, (1, 64, 256)
GRPO_BATCH, GRPO_SEQ, GRPO_PROMPT, GRPO_MICRO = 32, 2048, 512, 8
UNITS = {"_tok_s": "tokens per second", "_s": "seconds", "_gb_s": "1e9 bytes per second",
         "_tflop_s": "1e12 FLOP per second", "_frac": "fraction (0-1)", "_gb": "1e9 bytes",
         "_count": "count"}
ROLLOUT_ENGINE = dict(max_cache_len=2048, prefill_buckets=(32, 64, 96, 128))
ROLLOUT_DECODE_STEPS = 8
HBM_FILL = 0.9  # share of a chip's HBM a part's compiled peak may take
# jax's device_kind of a TPU -> its generation's prefix of tpu_aot.SLICES' names.
TPU_KINDS = {"TPU v5 lite": "v5e", "TPU v6 lite": "v6e", "TPU v5": "v5p"}
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


# ---- sizing: a part's per-chip memory, compiled before anything is allocated ----

def round_up(n: int, multiple: int) -> int:
  """The smallest multiple of `multiple` that is >= n."""
  return -(-n // multiple) * multiple


def halvings(n: int, shards: int) -> list[int]:
  """n, n/2, n/4, ... each rounded up to a multiple of `shards`, largest first: the sizes a
  part shrinks through (a row count below the batch shards would not shrink the per-chip
  work)."""
  sizes = {round_up(max(n >> i, 1), shards) for i in range(n.bit_length())}
  return sorted(sizes, reverse=True)


def chip_hbm(device: jax.Device, hbm_gib: float | None = None) -> float:
  """HBM bytes of one chip: `hbm_gib` when given, else the device's own `bytes_limit`, else
  tpu_aot.SLICES' figure for its TPU kind. ValueError when none of them says."""
  if hbm_gib is not None:
    return hbm_gib * tpu_aot.GIB
  try:
    stats = device.memory_stats() or {}
  except jax.errors.JaxRuntimeError:  # a device this process cannot address (deviceless)
    stats = {}
  if "bytes_limit" in stats:
    return float(stats["bytes_limit"])
  generation = TPU_KINDS.get(device.device_kind)
  for name, tpu in tpu_aot.SLICES.items():
    if name.split("-")[0] == generation:
      return tpu.hbm_gib * tpu_aot.GIB
  raise ValueError(f"HBM per chip unknown for device kind {device.device_kind!r}: "
                   f"pass --hbm-gib")


class Budget(NamedTuple):
  """One chip's HBM (bytes) and what a part may take of it."""
  hbm: float

  def fits(self, peak: float) -> bool:
    return peak <= HBM_FILL * self.hbm

  def skipped(self, peak: float) -> dict:
    """The report of a part that does not fit."""
    return {"skipped": f"needs {peak / tpu_aot.GIB:.3g} GiB of "
                       f"{HBM_FILL * self.hbm / tpu_aot.GIB:.3g} GiB per chip"}


def largest_fitting(sizes: Sequence[int], peak_of: Callable[[int], float],
                    budget: Budget) -> tuple[int | None, float]:
  """(the first of `sizes` whose peak fits, its peak), or (None, the last size's peak)."""
  peak = math.inf
  for size in sizes:
    peak = peak_of(size)
    if budget.fits(peak):
      return size, peak
  return None, peak


def abstract_model(cfg: ModelConfig, mesh: Mesh) -> nnx.Module:
  """Qwen3(cfg) placed on `mesh` as `_model` places it, abstract: compiles allocate nothing."""
  return abstract_sharded(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)), mesh)


def _replicated(tree, mesh: Mesh):
  return tpu_aot.shaped(tree, jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), tree))


def engine_peak(engine: SlotEngine, rows: int, chunk: int, length: int) -> float:
  """Per-chip bytes of `engine` (over an abstract or real model) with `rows` slots of
  `length` cache entries fed prompts of `chunk` tokens, as the engine pads them to its
  buckets: the larger of a generate block and an append of `chunk` tokens to every slot
  (each holds the weights and the whole decode state; an append's attention over the
  state bounds a fresh prefill's), plus a prefill's prefix of rows x chunk waiting beside
  them. Compiled on abstract arrays; nothing runs. A program the compiler refuses for HBM
  (TPU) counts as what the compiler says it needs."""
  try:
    return _engine_peak(engine, rows, chunk, length)
  except jax.errors.JaxRuntimeError as err:
    return tpu_aot.refused_bytes(err)


def _engine_peak(engine: SlotEngine, rows: int, chunk: int, length: int) -> int:
  mesh, cfg = engine.mesh, engine.cfg
  slots = pick_bucket(rows, engine.decode_widths)
  entries = pick_bucket(length, engine.decode_lengths)
  prefill_rows = pick_bucket(rows, engine.row_buckets)
  width = pick_bucket(chunk, engine.prefill_buckets)
  host = lambda n, shape=(), dtype=np.int32: _replicated(np.zeros((n, *shape), dtype), mesh)
  sp = lambda n: _replicated(SlotParams.from_requests([], [], engine.max_stop_ids, n), mesh)
  graphdef, params = engine.graphdef, engine.params
  with jax.set_mesh(mesh):  # the mesh's platform picks the cache layout and the kernels
    state = jax.eval_shape(lambda: init_decode_state(cfg, slots, entries, engine.max_stop_ids,
                                                     engine.cache_dtype))
    state = tpu_aot.shaped(state, decode_state_shardings(state, mesh))
    generate = tpu_aot.compile_program(
        functools.partial(slot_engine._generate, graphdef, num_steps=engine.decode_steps),
        (params, state, host(slots, dtype=bool)), donate_argnums=(1,))
    append = tpu_aot.compile_program(
        functools.partial(slot_engine._append, graphdef, length=entries),
        (params, state, host(slots), host(slots), host(slots, (width,)), host(slots), sp(slots)),
        donate_argnums=(1,))
    prefill = tpu_aot.compile_program(
        functools.partial(slot_engine._prefill, graphdef, cache_dtype=engine.cache_dtype),
        (params, host(prefill_rows, (width,)), host(prefill_rows), sp(prefill_rows)))
  return max(generate.peak, append.peak) + prefill.output


def grpo_state_bytes(cfg: ModelConfig, mesh: Mesh) -> int:
  """Per-chip bytes a Trainer holds before its first step: the fp32 parameters, AdamW's two
  moments and the frozen reference, each sharded like its parameter."""
  return 4 * tpu_aot.per_chip_bytes(nnx.state(abstract_model(cfg, mesh), nnx.Param))


def step_peak(trainer: Trainer, batch: TrainBatch) -> float:
  """Per-chip bytes of the trainer's step on `batch`, compiled and not run (or what the
  compiler says it needs when it refuses the step for HBM)."""
  try:
    return compiled_peak(trainer.compiled_step(batch))
  except jax.errors.JaxRuntimeError as err:
    return tpu_aot.refused_bytes(err)


def compiled_peak(compiled: jax.stages.Compiled) -> int:
  """Per-chip bytes of a compiled program (tpu_aot.CompiledProgram's formula)."""
  m = compiled.memory_analysis()
  return tpu_aot.CompiledProgram(m.argument_size_in_bytes, m.output_size_in_bytes,
                                 m.alias_size_in_bytes, m.temp_size_in_bytes, 0.0, "").peak


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


class Setting(NamedTuple):
  """What every part runs with: the mesh, one chip's budget and the one-chip figures."""
  mesh: Mesh
  budget: Budget
  bandwidth: float  # bytes/s of one chip
  peak: float  # bf16 FLOP/s of one chip

  @property
  def chips(self) -> int:
    return self.mesh.size


def _config(preset: str, param_dtype: str) -> ModelConfig:
  return get_preset(preset, param_dtype=param_dtype, compute_dtype="bfloat16")


def _model(cfg: ModelConfig, mesh: Mesh) -> nnx.Module:
  return create_sharded(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)), mesh)


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


def bench_decode(preset: str, setting: Setting) -> dict:
  """Each batch of DECODE_BATCHES (rounded up to the batch shards) that fits the budget."""
  cfg = _config(preset, "bfloat16")
  abstract = abstract_model(cfg, setting.mesh)
  batches = sorted({round_up(b, batch_shards(setting.mesh)) for b in DECODE_BATCHES})
  peaks = {b: engine_peak(_decode_engine(abstract, b), b, PROMPT_LEN, PROMPT_LEN + NEW_TOKENS)
           for b in batches}
  fitting = [b for b in batches if setting.budget.fits(peaks[b])]
  out = {f"b{b}": setting.budget.skipped(peaks[b]) for b in batches if b not in fitting}
  if not fitting:
    return out
  model = _model(cfg, setting.mesh)
  weights = _param_bytes(model)
  rng = np.random.default_rng(0)
  out["param_gb"] = round(weights / 1e9, 3)
  for batch in fitting:
    prompts = rng.integers(0, cfg.vocab_size, (batch, PROMPT_LEN)).tolist()
    engine = _decode_engine(model, batch)
    start = time.perf_counter()
    _decode_pass(engine, prompts)
    compile_s = time.perf_counter() - start
    passes = [_decode_pass(engine, prompts) for _ in range(2)]
    prefill_s = min(p[0] for p in passes)
    decode_tok_s = max(tokens / decode_s for _, decode_s, tokens in passes)
    step = decode_step_bytes(cfg, weights, batch, PROMPT_LEN + NEW_TOKENS / 2, 2)
    roof = roofline_tok_s(step, batch, setting.chips * setting.bandwidth)
    out[f"b{batch}"] = {
        "prefill_tok_s": round(batch * PROMPT_LEN / prefill_s, 1),
        "decode_tok_s": round(decode_tok_s, 1), "roofline_tok_s": round(roof, 1),
        "roofline_frac": round(decode_tok_s / roof, 3), "first_calls_s": round(compile_s, 1),
        "peak_estimate_gb": round(peaks[batch] / 1e9, 3)}
    print(f"{preset} decode b{batch}: {out[f'b{batch}']}", file=sys.stderr, flush=True)
  return out


def _grpo_batch(cfg: ModelConfig, rows: int) -> TrainBatch:
  """rows x GRPO_SEQ random tokens, loss on all but the GRPO_PROMPT prompt tokens."""
  rng = np.random.default_rng(0)
  loss = np.zeros((rows, GRPO_SEQ), np.float32)
  loss[:, GRPO_PROMPT:] = 1
  return TrainBatch(rng.integers(0, cfg.vocab_size, (rows, GRPO_SEQ)).astype(np.int32),
                    np.ones((rows, GRPO_SEQ), np.int32), loss,
                    np.where(loss > 0, -11.9, 0).astype(np.float32),
                    rng.random(rows).astype(np.float32),
                    np.arange(rows, dtype=np.int32) // 8, np.full((rows,), AGENT, np.int32))


def _grpo_trainer(cfg: ModelConfig, setting: Setting,
                  batch: TrainBatch) -> tuple[Trainer | None, dict]:
  """A trainer whose step on `batch` fits the budget at the largest micro-batch of
  GRPO_MICRO's halvings that does, and its sizes; None and the skip report if none does
  (the optimiser state is checked before it is allocated)."""
  state = grpo_state_bytes(cfg, setting.mesh)
  if not setting.budget.fits(state):
    return None, setting.budget.skipped(state)
  model = _model(cfg, setting.mesh)
  trainers: dict[int, Trainer] = {}

  def peak_of(micro: int) -> float:
    trainers.clear()  # the previous size's optimiser state goes before the next is made
    trainers[micro] = Trainer(dict(beta=0.05, micro_batch_size=micro, learning_rate=1e-6),
                              model, setting.mesh)
    return step_peak(trainers[micro], batch)

  shards = batch_shards(setting.mesh)
  micro, peak = largest_fitting(halvings(round_up(GRPO_MICRO, shards), shards), peak_of,
                                setting.budget)
  if micro is None:
    return None, setting.budget.skipped(peak)
  return trainers[micro], {"micro_batch_count": micro, "peak_estimate_gb": round(peak / 1e9, 3)}


def bench_grpo(preset: str, setting: Setting) -> dict:
  cfg = _config(preset, "float32")
  rows = round_up(GRPO_BATCH, round_up(GRPO_MICRO, batch_shards(setting.mesh)))
  batch = _grpo_batch(cfg, rows)
  trainer, sizes = _grpo_trainer(cfg, setting, batch)
  if trainer is None:
    return sizes
  start = time.perf_counter()
  trainer.train_step(batch)
  first_s = time.perf_counter() - start
  step_s = _best(lambda: trainer.train_step(batch), 2)
  flops = grpo_step_flops(cfg, rows, GRPO_SEQ, GRPO_SEQ - GRPO_PROMPT, with_reference=True)
  out = {"step_s": round(step_s, 3), "first_step_s": round(first_s, 1),
         "tok_s": round(rows * GRPO_SEQ / step_s, 1),
         "model_tflop_s": round(flops / step_s / 1e12, 1),
         "mfu_frac": round(mfu(flops, step_s, setting.chips * setting.peak), 3),
         "rows_count": rows, **sizes}
  print(f"{preset} grpo: {out}", file=sys.stderr, flush=True)
  return out


def rollout_slots(cfg: ModelConfig, mesh: Mesh, slots: int,
                  budget: Budget) -> tuple[int | None, float]:
  """(the most slots of `slots`' halvings, rounded up to the batch shards, whose engine fits
  the budget with every slot's cache row full, its peak), or (None, the fewest's peak)."""
  abstract = abstract_model(cfg, mesh)
  shards = batch_shards(mesh)

  def peak_of(n: int) -> float:
    engine = SlotEngine(abstract, num_slots=n, decode_steps=ROLLOUT_DECODE_STEPS,
                        **ROLLOUT_ENGINE)
    return engine_peak(engine, n, engine.max_chunk, engine.max_cache_len + engine.max_chunk)

  return largest_fitting(halvings(round_up(slots, shards), shards), peak_of, budget)


def bench_rollout(preset: str, setting: Setting, scale: int, slots: int) -> dict:
  cfg = _config(preset, "bfloat16")
  slots, peak = rollout_slots(cfg, setting.mesh, slots, setting.budget)
  if slots is None:
    return setting.budget.skipped(peak)
  model = _model(cfg, setting.mesh)

  def workload(n):
    parts = [rollout.make_workload(model.cfg.vocab_size, seed) for seed in range(n)]
    return [d for _, ds in parts for d in ds] + [e for es, _ in parts for e in es]

  def run(jobs):
    engine = SlotConversationEngine(model, num_slots=slots,
                                    decode_steps_per_poll=ROLLOUT_DECODE_STEPS, **ROLLOUT_ENGINE)
    start = time.perf_counter()
    tokens = play(engine, jobs).tokens
    return tokens, time.perf_counter() - start

  warm_tokens, warm_s = run(workload(1))
  jobs = workload(scale)
  tokens, seconds = run(jobs)
  out = {"requests_count": len(jobs), "num_slots_count": slots, "tokens_count": tokens,
         "rollout_s": round(seconds, 2), "rollout_tok_s": round(tokens / seconds, 1),
         "warmup_s": round(warm_s, 1), "warmup_tokens_count": warm_tokens,
         "peak_estimate_gb": round(peak / 1e9, 3)}
  print(f"{preset} rollout: {out}", file=sys.stderr, flush=True)
  return out


def parse_mesh(text: str) -> dict[str, int]:
  """'fsdp=-1' or 'data=2,fsdp=-1,tensor=2' -> {axis: size}; ValueError on anything else."""
  try:
    sizes = {axis.strip(): int(size) for axis, size in
             (item.split("=") for item in text.split(","))}
  except ValueError as err:
    raise ValueError(f"--mesh {text!r}: expected AXIS=SIZE[,AXIS=SIZE...] over {MESH_AXES}, "
                     f"one size may be -1") from err
  return sizes


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--presets", default="qwen3-0.6b,qwen3-1.7b")
  parser.add_argument("--parts", default="decode,grpo,rollout",
                      help="comma-separated subset of decode, grpo, rollout")
  parser.add_argument("--rollout-scale", type=int, default=4,
                      help="copies of bench/rollout.py's workload (4: 192 episodes + 32 designer)")
  parser.add_argument("--rollout-slots", type=int, default=256)
  parser.add_argument("--mesh", default="fsdp=-1",
                      help="mesh over all devices, e.g. 'fsdp=-1' or 'fsdp=4,tensor=2' "
                           f"(axes {', '.join(MESH_AXES)}; absent axes are 1)")
  parser.add_argument("--hbm-gib", type=float,
                      help="HBM per chip in GiB (default: the device's, else its TPU kind's)")
  parser.add_argument("--partial", help="file rewritten with the results so far after each part")
  args = parser.parse_args(argv)
  if jax.default_backend() == "cpu":
    print(REFUSAL, file=sys.stderr)
    return 2
  parts = args.parts.split(",")
  unknown = sorted(set(parts) - {"decode", "grpo", "rollout"})
  if unknown:
    parser.error(f"--parts: unknown {unknown}; expected a subset of decode,grpo,rollout")
  try:
    mesh = make_mesh(parse_mesh(args.mesh), jax.devices())
    budget = Budget(chip_hbm(jax.devices()[0], args.hbm_gib))
  except ValueError as err:
    parser.error(str(err))
  setting = Setting(mesh, budget, copy_bandwidth(), matmul_peak())
  result = {"bench": "accelerator", "backend": jax.default_backend(),
            "device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "chips_count": setting.chips, "mesh": dict(mesh.shape),
            "hbm_per_chip_gb": round(budget.hbm / 1e9, 2),
            "copy_bandwidth_gb_s": round(setting.bandwidth / 1e9, 1),
            "bf16_matmul_peak_tflop_s": round(setting.peak / 1e12, 1), "units": UNITS}
  failed = False
  for preset in args.presets.split(","):
    entry = result[preset] = {}
    for part in ("decode", "grpo", "rollout"):
      if part not in parts:
        continue
      try:  # a failing part is reported in the JSON; the other parts still run
        entry[part] = _run_part(part, preset, args, setting)
      except Exception as err:  # pylint: disable=broad-except
        failed = True
        entry[part] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        traceback.print_exc()
      _write_partial(args.partial, result)
    _compare_rollout(entry)
  print(json.dumps(result))
  return 1 if failed else 0


def _run_part(part: str, preset: str, args, setting: Setting) -> dict:
  if part == "decode":
    return bench_decode(preset, setting)
  if part == "grpo":
    return bench_grpo(preset, setting)
  return bench_rollout(preset, setting, args.rollout_scale, args.rollout_slots)


def _compare_rollout(entry: dict) -> None:
  """rollout_vs_decode_frac: the rollout's rate over the decode rate at its slots' batch."""
  slots = entry.get("rollout", {}).get("num_slots_count")
  same_batch = entry.get("decode", {}).get(f"b{slots}", {})
  if "decode_tok_s" in same_batch:
    entry["rollout"]["rollout_vs_decode_frac"] = round(
        entry["rollout"]["rollout_tok_s"] / same_batch["decode_tok_s"], 3)


def _write_partial(path: str | None, result: dict) -> None:
  """The results so far, rewritten after every part: a run cut off by its time limit still
  leaves the finished parts."""
  if path:
    pathlib.Path(path).write_text(json.dumps(result) + "\n")

if __name__ == "__main__":
  sys.exit(main())
