r"""Memory and throughput plan of a run, per chip, before any chip is rented.

    python -m spade_jax.plan --config games.py [--topology v5p-64] [--mfu 0.4] \
        [--compile [--hlo_dir DIR]] [--config.model.preset=qwen3-8b ...]

Prints per chip: parameters, optimiser state, the frozen reference, gradients, the
activations of one training micro-batch with and without rematerialisation, the engine's KV
cache, its copy of the weights and its programs' transients; the train step's and the
rollout's sums against the chip's HBM; and the FLOPs of one
step (rollout and training tokens) with the ideal step time at the given MFU. The model is
built abstractly (`nnx.eval_shape`): nothing is allocated, so it runs in seconds on any
machine. The formulas are in docs/plan.md; tests/test_plan.py checks the training part against XLA's
`memory_analysis()` of the compiled step. With `--compile`, every program of a step is also
compiled for the slice by XLA's TPU compiler without the chips (spade_jax/plan_compile.py):
per program its argument / temporary / output memory per chip, its peak beside what stays
resident from the other programs against the chip's HBM, its compile time and the
collectives in its loop bodies; the last line is one JSON object.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import sys
from collections.abc import Sequence

import jax
from absl import flags
from flax import nnx

from spade_jax import config_schema
from spade_jax.experiment import Experiment
from spade_jax.model import Qwen3, lora
from spade_jax.model.attention_impl import resolve_attention_impl
from spade_jax.model.config import ModelConfig
from spade_jax.model.train_attention import DEFAULT_BLOCK, MAX_BLOCKS
from spade_jax.plan_engine import dtype_bytes, engine_memory
from spade_jax.rl.step_inputs import bounded_shape

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
  hbm_bytes: int
  peak_flops: float  # dense bf16 FLOP/s
  cores_per_chip: int  # what the number in a slice name counts: v4 / v5p count TensorCores


CHIPS = {
    "v4": Chip(32 * GIB, 275e12, 2),
    "v5e": Chip(16 * GIB, 197e12, 1),
    "v5p": Chip(95 * GIB, 459e12, 2),
    "v6e": Chip(32 * GIB, 918e12, 1),
}


def parse_topology(name: str) -> tuple[Chip, int]:
  """'v5p-64' -> (the v5p chip, 32 chips); 'v6e-64' -> (v6e, 64)."""
  m = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", name)
  if m is None or m[1] not in CHIPS:
    raise config_schema.ConfigError(f"--topology={name!r}: expected <chip>-<size> with chip "
                                    f"in {sorted(CHIPS)}, e.g. v5p-64")
  chip = CHIPS[m[1]]
  return chip, max(1, int(m[2]) // chip.cores_per_chip)


@functools.cache
def parameter_counts(cfg: ModelConfig) -> tuple[int, int]:
  """(total, active per token) parameters, from the abstract model (nothing allocated);
  LoRA adapters count in both."""
  total = _count(cfg, nnx.Param)
  if not cfg.is_moe:
    return total, total
  moe_layers = sum(cfg.is_moe_layer(i) for i in range(cfg.num_layers))
  idle = cfg.num_experts - cfg.num_experts_per_tok
  return total, total - moe_layers * idle * 3 * cfg.hidden_size * cfg.moe_intermediate_size


@functools.cache
def trained_count(cfg: ModelConfig) -> int:
  """Parameters the optimiser updates: all of them, or (LoRA) only the adapters."""
  return _count(cfg, lora.trainable(cfg))


@functools.cache
def _abstract_model(cfg: ModelConfig) -> Qwen3:
  return nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)))


def _count(cfg: ModelConfig, which) -> int:
  state = nnx.state(_abstract_model(cfg), which)
  return sum(math.prod(x.shape) for x in jax.tree.leaves(state))


@functools.cache
def layer_counts(cfg: ModelConfig) -> tuple[int, int]:
  """(parameters, trained parameters) of the largest decoder layer: the stacked [L_group,
  ...] leaves of each scanned group (model/qwen3.py) divided by the group's depth."""
  model = _abstract_model(cfg)
  per_group = lambda which: [
      sum(math.prod(x.shape[1:]) for x in jax.tree.leaves(nnx.state(g, which)))
      for g in model.groups]
  return max(per_group(nnx.Param)), max(per_group(lora.trainable(cfg)))


def attention_pairs(t: int) -> int:
  """Query-key pairs the blocked causal attention holds per head for a row of length t."""
  block = -(-max(DEFAULT_BLOCK, -(-t // MAX_BLOCKS)) // DEFAULT_BLOCK) * DEFAULT_BLOCK
  n = -(-t // block)
  return block * block * n * (n + 1) // 2


def attention_residualdtype_bytes(cfg: ModelConfig, t: int, kernel: str) -> int:
  """Bytes the uncached attention `kernel` (attention_impl.py) keeps for its backward per row
  of length t, beyond q, k, v and the output: the blocked kernel (CPU) the float32
  probabilities of every head and the float32 mask bias of each kv group per query-key pair;
  the fused kernels (splash on TPU, cuDNN) a float32 log-sum-exp per head and query; the
  plain XLA one the whole [T, T] probabilities of every head."""
  h, group = cfg.num_heads, cfg.num_heads // cfg.num_kv_heads
  if kernel == "blocked":
    return 4 * (h + group) * attention_pairs(t)
  if kernel == "xla":
    return 4 * h * t * t
  return 4 * h * t


def layer_activationdtype_bytes(cfg: ModelConfig, t: int, kernel: str = "blocked") -> int:
  """Bytes one decoder layer keeps for its backward pass, per row of length t.

  Per token, in the compute dtype: six D-wide arrays (layer input, the two norm outputs,
  attention output, residual, MLP output), four copies of q, k and v (projection, q/k norm,
  rotary, head-major), four MLP-wide arrays (gate, up, SiLU, product; k experts' worth in an
  MoE layer, plus its router logits); then what the attention `kernel` keeps
  (`attention_residual_bytes`). With LoRA each adapted projection also keeps its `[T, r]`
  product `x A`.
  """
  c = dtype_bytes(cfg.compute_dtype)
  d, hd = cfg.hidden_size, cfg.head_dim
  mlp = (4 * cfg.num_experts_per_tok * cfg.moe_intermediate_size + cfg.num_experts
         if cfg.is_moe else 4 * cfg.intermediate_size)
  per_token = c * (6 * d + 4 * (cfg.num_heads + 2 * cfg.num_kv_heads) * hd + mlp)
  per_token += c * cfg.lora_rank * len(lora.target_names(cfg)) if cfg.lora_rank else 0  # x A
  return t * per_token + attention_residualdtype_bytes(cfg, t, kernel)


@dataclasses.dataclass(frozen=True)
class TrainMemory:
  """Bytes per chip of one training step (what XLA's memory_analysis of the step counts)."""
  params: int
  opt_state: int
  reference: int
  grads: int
  batch: int
  activations: int  # one micro-batch, no rematerialisation
  activations_remat: int  # one micro-batch, each layer rematerialised
  layer_transient: int = 0  # one layer's gathered weights and unsharded gradient (FSDP)

  @property
  def total(self) -> int:
    return (self.params + self.opt_state + self.reference + self.grads + self.batch
            + self.layer_transient + self.activations)


def train_memory(cfg: ModelConfig, *, rows: int, micro_batch: int, t: int, loss_positions: int,
                 beta: float, dp: int = 1, model_shards: int = 1,
                 logprob_chunk: int | None = None, platform: str = "cpu") -> TrainMemory:
  """The step's memory per chip: `rows` x `t` tokens in micro-batches of `micro_batch` rows
  split over `dp` chips, logits at `loss_positions` positions a row, parameters split
  `model_shards` ways; float32 gradients (the running sum and one micro-batch's). With
  `logprob_chunk` (config.rl.logprob_remat) only one chunk's logits are live at a time.
  With LoRA the optimiser state and gradients are the adapters' and the reference is the
  base itself (no copy). The layers run as one scan (model/qwen3.py): without
  rematerialisation the stacked residuals of every layer plus one more layer's (the
  iteration the scan is writing or the backward is reading) are live; with it, every
  layer's input and one layer's residuals. With the parameters split (FSDP), the layer
  being computed is gathered whole in the compute dtype, and in the backward its float32
  weight gradient is whole until it is reduce-scattered.
  The attention's residuals are those of the kernel `platform` resolves to."""
  total, _ = parameter_counts(cfg)
  trained = trained_count(cfg)
  p = dtype_bytes(cfg.param_dtype)
  r = -(-micro_batch // dp)  # rows of one micro-batch on one chip
  layer = layer_activationdtype_bytes(
      cfg, t, resolve_attention_impl(cfg.attention_impl, cfg.compute_dtype, platform))
  # The chunks' softmax residuals (f32), or one chunk's logits and their gradient.
  positions = loss_positions if logprob_chunk is None else 2 * logprob_chunk
  logits = r * positions * cfg.vocab_size * 4
  inputs = cfg.num_layers * r * t * cfg.hidden_size * dtype_bytes(cfg.compute_dtype)
  padded_rows = -(-rows // micro_batch) * micro_batch
  layer_params, layer_trained = layer_counts(cfg)
  gathered = layer_params * dtype_bytes(cfg.compute_dtype) + layer_trained * 4
  return TrainMemory(
      params=total * p // model_shards, opt_state=2 * trained * p // model_shards,
      reference=total * p // model_shards if beta > 0 and not cfg.lora_rank else 0,
      grads=2 * trained * 4 // model_shards,
      batch=padded_rows * (5 * t + loss_positions) * 4 // dp,  # five [rows, T] + positions
      activations=(cfg.num_layers + 1) * r * layer + logits,
      activations_remat=inputs + r * layer + logits,
      layer_transient=gathered if model_shards > 1 else 0)


@dataclasses.dataclass(frozen=True)
class Plan:
  chips: int
  micro_batch: int  # rows, rounded up to a multiple of data x fsdp
  hbm_bytes: int
  train: TrainMemory
  kv_cache: int
  rollout_flops: float
  train_flops: float
  peak_flops: float
  lora_rank: int = 0
  trained: int = 0  # parameters the optimiser updates
  engine_weights: int = 0  # the engine's copy of the parameters (engine/weights.py)
  engine_replicas: int = 1  # copies of the weights the engine keeps over the slice
  decode_transient: int = 0  # what a decode block holds beside its arguments
  append_transient: int = 0  # what the step's largest append holds beside its arguments

  def total(self, remat: bool) -> int:
    """The train step's need: the trainer's state and one micro-batch, beside the engine's
    weights copy and KV cache."""
    acts = self.train.activations_remat if remat else self.train.activations
    return (self.train.total - self.train.activations + acts + self.kv_cache
            + self.engine_weights)

  @property
  def decode_peak(self) -> int:
    """A decode block's peak: its arguments (weights copy, decode state) and transients."""
    return self.engine_weights + self.kv_cache + self.decode_transient

  @property
  def append_peak(self) -> int:
    return self.engine_weights + self.kv_cache + self.append_transient

  @property
  def rollout_total(self) -> int:
    """The rollout's need: the larger engine program beside the trainer's parameters,
    optimiser state and reference, which stay resident."""
    t = self.train
    return t.params + t.opt_state + t.reference + max(self.decode_peak, self.append_peak)

  def step_time(self, mfu: float) -> float:
    return (self.rollout_flops + self.train_flops) / (self.chips * self.peak_flops * mfu)


def make_plan(experiment: Experiment, chip: Chip, chips: int, *, prompt_tokens: int = 1024,
              model_overrides: dict | None = None) -> Plan:
  """The plan of `experiment` on `chips` chips (formulas: docs/plan.md); `model_overrides`
  replace ModelConfig fields, as in plan_compile.compile_step_programs."""
  cfg = dataclasses.replace(experiment.model.architecture(), **(model_overrides or {}))
  s, rl = experiment.selfplay, experiment.rl
  mesh = experiment.mesh_shape
  fixed = math.prod(v for v in mesh.values() if v != -1)
  mesh = {a: chips // fixed if v == -1 else v for a, v in mesh.items()}
  dp = mesh.get("data", 1) * mesh.get("fsdp", 1)
  t = experiment.engine.max_cache_len  # the longest row (one whole episode)
  agent_rows = s.num_envs * s.group_size * (2 if s.train_agent_on_hint_arm else 1)
  rows = agent_rows + -(-s.num_envs // s.k)  # designer rows due per step, on average
  beta = rl.beta
  # The trainer's larger step: every batch with designer rows pads to it (rl/step_inputs.py).
  shape = bounded_shape(rl.bounds, designer=True, micro_batch_size=rl.micro_batch_size,
                        multiple_of=dp,
                        chunk=rl.logprob_chunk if rl.logprob_positions == "loss" else None)
  micro_batch = shape.micro_batch
  train = train_memory(cfg, rows=shape.rows, micro_batch=micro_batch, t=shape.length,
                       loss_positions=shape.loss_width or shape.length,
                       beta=beta, dp=dp, model_shards=chips // mesh.get("data", 1),
                       logprob_chunk=rl.logprob_chunk if rl.logprob_remat else None,
                       platform="tpu")
  total, active = parameter_counts(cfg)
  engine = engine_memory(cfg, experiment.engine, chips, mesh.get("data", 1), total,
                         s.num_envs)
  episodes = s.num_envs * 2 * s.group_size
  agent_tokens = episodes * min(t, prompt_tokens + s.max_turns * s.agent_sampling.max_new_tokens)
  designer_tokens = -(-s.num_envs // s.k) * (prompt_tokens + s.designer_sampling.max_new_tokens)
  # Forward FLOPs per token: 2 per active parameter plus causal attention over ~t/2 keys.
  per_token = 2 * active + 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * t / 2
  # Forward, input gradients, weight gradients (none for a frozen LoRA base), reference.
  passes = (2 if cfg.lora_rank else 3) + (1 if beta > 0 else 0) + (cfg.remat != "none")
  return Plan(chips=chips, micro_batch=micro_batch, hbm_bytes=chip.hbm_bytes, train=train,
              kv_cache=engine.kv_cache,
              rollout_flops=(agent_tokens + designer_tokens) * per_token,
              train_flops=rows * t * passes * per_token, peak_flops=chip.peak_flops,
              lora_rank=cfg.lora_rank, trained=trained_count(cfg),
              engine_weights=engine.weights, engine_replicas=engine.replicas,
              decode_transient=engine.decode_transient,
              append_transient=engine.append_transient)


def report(plan: Plan, name: str, mfu: float) -> str:
  g = lambda n: f"{n / GIB:8.2f} GiB"
  lines = [f"{name}: {plan.chips} chips, {plan.hbm_bytes / GIB:.0f} GiB HBM each; micro-batch "
           f"{plan.micro_batch} rows (per chip):",
           f"  parameters              {g(plan.train.params)}"
           + (f"  (LoRA rank {plan.lora_rank}: {plan.trained:,} trained)" if plan.lora_rank
              else ""),
           f"  optimiser state (Adam)  {g(plan.train.opt_state)}",
           f"  reference policy        {g(plan.train.reference)}",
           f"  gradients (sum + micro) {g(plan.train.grads)}",
           f"  one layer, gathered     {g(plan.train.layer_transient)}",
           f"  training batch          {g(plan.train.batch)}",
           f"  activations, no remat   {g(plan.train.activations)}",
           f"  activations, remat      {g(plan.train.activations_remat)}",
           f"  engine KV cache         {g(plan.kv_cache)}",
           f"  engine weights copy     {g(plan.engine_weights)}  ({plan.engine_replicas} "
           f"x {plan.chips // plan.engine_replicas} chips)",
           f"  decode block transients {g(plan.decode_transient)}",
           f"  largest append's        {g(plan.append_transient)}"]
  needs = [(f"train step {'with' if remat else 'without'} remat", plan.total(remat))
           for remat in (False, True)]
  for label, need in [*needs, ("rollout (trainer resident)", plan.rollout_total)]:
    verdict = "fits" if need <= plan.hbm_bytes else "does NOT fit"
    lines.append(f"  {label:26s} {g(need)}  headroom {g(plan.hbm_bytes - need)}  ({verdict})")
  lines += [f"  step FLOPs: rollout {plan.rollout_flops:.3e}, training {plan.train_flops:.3e}",
            f"  ideal step time at MFU {mfu:.0%}: {plan.step_time(mfu):.1f} s"]
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
  fv = flags.FlagValues()
  topology = flags.DEFINE_string("topology", "v5p-64", "TPU slice, e.g. v5p-64, v5e-256, v6e-64",
                                 flag_values=fv)
  mfu = flags.DEFINE_float("mfu", 0.4, "model FLOPs utilisation for the ideal step time",
                           flag_values=fv)
  prompt = flags.DEFINE_integer("prompt_tokens", 1024, "assumed first-prompt length",
                                flag_values=fv)
  compile_ = flags.DEFINE_boolean(
      "compile", False, "also compile every program of a step for the slice with XLA's TPU "
      "compiler, deviceless (needs libtpu: requirements-test.txt), and report its memory",
      flag_values=fv)
  hlo_dir = flags.DEFINE_string("hlo_dir", None, "with --compile: write each program's HLO "
                                "to DIR/<program>.hlo.txt", flag_values=fv)
  try:
    config, _ = config_schema.parse_config_args(sys.argv if argv is None else argv, fv,
                                                prog="python -m spade_jax.plan")
    # The checkpoint and corpus files are the target machine's: not checked here.
    experiment = config_schema.validate(config, files=False)
    chip, chips = parse_topology(topology.value)
    plan = make_plan(experiment, chip, chips, prompt_tokens=prompt.value)
    if compile_.value:
      check_compilable(topology.value, experiment.mesh_shape, experiment.rl.micro_batch_size)
  except (config_schema.ConfigError, flags.Error) as err:
    sys.exit(f"error: {err}")
  m = experiment.model
  print(f"model {m.preset} ({m.param_dtype} parameters, {m.compute_dtype} compute), "
        f"T = {experiment.engine.max_cache_len}, mesh {experiment.mesh_shape}, "
        f"logprob_remat {experiment.rl.logprob_remat}")
  print(report(plan, topology.value, mfu.value))
  if compile_.value:
    from spade_jax import plan_compile  # imports the model, engine and trainer
    reports = plan_compile.compile_step_programs(experiment, topology.value,
                                                 hlo_dir=hlo_dir.value)
    print(plan_compile.compiled_report(reports, topology.value))
    print(json.dumps(plan_compile.summary(reports, topology.value)))


def check_compilable(topology: str, mesh_shape: dict[str, int], micro_batch_size: int) -> None:
  """Raises ConfigError unless the run's mesh can be compiled for `topology` here (a known
  slice whose chips the mesh fits, libtpu installed) and its micro-batches split over the
  mesh's batch shards as the trainer requires."""
  from spade_jax import tpu_aot
  from spade_jax.model.sharding import batch_shards, make_mesh
  if topology not in tpu_aot.SLICES:
    raise config_schema.ConfigError(f"--compile knows the slices {sorted(tpu_aot.SLICES)}, "
                                    f"not {topology!r}")
  if not tpu_aot.libtpu_available():
    raise config_schema.ConfigError("--compile needs XLA's TPU compiler: pip install "
                                    "-r requirements-test.txt (libtpu pinned to jax's version)")
  try:
    mesh = make_mesh(mesh_shape, tpu_aot.slice_devices(topology))
  except ValueError as err:
    raise config_schema.ConfigError(f"config.mesh on {topology}: {err}") from None
  shards = batch_shards(mesh)
  if micro_batch_size % shards:
    raise config_schema.ConfigError(
        f"config.rl.micro_batch_size={micro_batch_size} on {topology}: the trainer needs a "
        f"multiple of the mesh's {shards} batch shards")


if __name__ == "__main__":
  main()
