"""Every program one step of a run executes, compiled for a TPU slice without the chips.

`python -m spade_jax.plan --config C --topology T --compile` calls `compile_step_programs`:
the GRPO train step at the config's largest micro-batch shape, the engine's decode block at
full capacity, its largest append (the designer prompts' prefill) and the copy of the
trainer's parameters into the engine's weights (`reshard`), each lowered on
abstract arguments (`jax.ShapeDtypeStruct`s sharded over a mesh of the slice's deviceless
TPU devices, spade_jax.tpu_aot) and compiled by XLA's TPU compiler. Nothing is allocated;
what comes back is the compiler's own per-chip memory and HLO.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax import tpu_aot
from spade_jax.engine import slot_engine
from spade_jax.engine.capacity import largest_append
from spade_jax.engine.state import SlotParams, init_decode_state, state_shardings
from spade_jax.experiment import Experiment
from spade_jax.model import Qwen3, lora
from spade_jax.model.config import ModelConfig
from spade_jax.model.sharding import abstract_sharded, batch_sharding, batch_shards, make_mesh
from spade_jax.rl.step_inputs import bounded_shape
from spade_jax.rl.trainer import compile_fns


@dataclasses.dataclass(frozen=True)
class ProgramReport:
  """One compiled program: per-chip memory, what stays resident beside it (bytes per chip
  of the other programs' state that outlives them: the decode state during the train step,
  the optimiser state and reference during rollout), and the collectives run once per loop
  iteration."""
  program: tpu_aot.CompiledProgram
  resident: int
  loop_collectives: tuple[tpu_aot.Collective, ...]

  @property
  def need(self) -> int:
    return self.program.peak + self.resident

  @property
  def moved(self) -> int:
    """Bytes per chip of every collective's result, each run once (loops counted once)."""
    return sum(c.bytes for c in tpu_aot.collectives(self.program.hlo))

  def summary(self) -> dict[str, float]:
    p, g = self.program, tpu_aot.GIB
    return {"peak_gib": round(p.peak / g, 3), "temp_gib": round(p.temp / g, 3),
            "argument_gib": round(p.argument / g, 3), "output_gib": round(p.output / g, 3),
            "resident_gib": round(self.resident / g, 3), "compile_s": round(p.compile_s, 1),
            "collective_gib": round(self.moved / g, 3), "refused": p.refused}


def abstract_model(cfg: ModelConfig, mesh) -> Qwen3:
  """Qwen3(cfg) as the trainer places it on `mesh`, abstract (model.sharding.abstract_sharded)."""
  return abstract_sharded(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)), mesh)


def _train_inputs(experiment: Experiment, cfg: ModelConfig, mesh):
  """(jitted fns, abstract params, opt_state, reference, rest) as the Trainer holds them."""
  rl = experiment.rl
  graphdef, params, rest = nnx.split(abstract_model(cfg, mesh), lora.trainable(cfg), ...)
  separate_ref = rl.beta > 0 and not cfg.lora_rank
  fns = compile_fns(graphdef, rl, mesh, params, rest, separate_ref)
  opt_state = jax.eval_shape(fns.init, params)
  opt_state = tpu_aot.shaped(opt_state, jax.tree.map(lambda x: x.sharding, opt_state))
  return fns, params, opt_state, params if separate_ref else None, rest


def train_step_program(experiment: Experiment, cfg: ModelConfig, mesh) -> Callable[[], Any]:
  """A thunk compiling the GRPO step at the run's larger fixed shape (the one with designer
  rows, rl/step_inputs.bounded_shape): what the trainer compiles."""
  rl = experiment.rl
  fns, params, opt_state, ref, rest = _train_inputs(experiment, cfg, mesh)
  chunk = rl.logprob_chunk if rl.logprob_positions == "loss" else None
  shape = bounded_shape(rl.bounds, designer=rl.bounds.designer_rows > 0,
                        micro_batch_size=rl.micro_batch_size, multiple_of=batch_shards(mesh),
                        chunk=chunk)
  m, mb, t = shape.rows // shape.micro_batch, shape.micro_batch, shape.length
  sh = batch_sharding(mesh, leading=1)
  arr = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=sh)
  batch = {name: arr((m, mb, t), jnp.float32)
           for name in ("loss_mask", "behaviour_logprobs", "weights")}
  batch.update(tokens=arr((m, mb, t), jnp.int32), attention_mask=arr((m, mb, t), jnp.int32),
               advantages=arr((m, mb), jnp.float32), roles=arr((m, mb), jnp.int32))
  if shape.loss_width is not None:
    batch["positions"] = arr((m, mb, shape.loss_width), jnp.int32)

  def compile_it():
    with jax.set_mesh(mesh):
      return fns.step.lower(params, opt_state, ref, rest, batch).compile()
  return compile_it


def _engine_inputs(experiment: Experiment, cfg: ModelConfig, mesh):
  """(graphdef, abstract weights copy, abstract full-capacity decode state, a SlotEngine for
  its buckets and mesh) as the engine holds them: its own copy of the trainer's parameters,
  in the compute dtype and the inference layout (engine/weights.py), on the engine's mesh
  (`engine.replica_chips`)."""
  e = experiment.engine
  engine = slot_engine.SlotEngine(abstract_model(cfg, mesh), num_slots=e.num_slots,
                                  max_cache_len=e.max_cache_len,
                                  prefill_buckets=e.prefill_buckets,
                                  decode_steps=e.decode_steps_per_poll, mesh=mesh,
                                  decode_widths=e.decode_widths,
                                  decode_lengths=e.decode_lengths,
                                  append_lengths=e.append_lengths,
                                  prefill_tokens=e.prefill_tokens,
                                  replica_chips=e.replica_chips)
  with jax.set_mesh(engine.mesh):
    state = jax.eval_shape(lambda: init_decode_state(
        cfg, engine.decode_widths[-1], engine.decode_lengths[-1], engine.max_stop_ids,
        engine.cache_dtype))
    state = tpu_aot.shaped(state, state_shardings(state, engine.mesh))
  return engine.graphdef, engine.params, state, engine


def decode_program(experiment: Experiment, cfg: ModelConfig, mesh) -> Callable[[], Any]:
  """A thunk compiling one decode block (decode_steps_per_poll steps) over every slot."""
  graphdef, params, state, engine = _engine_inputs(experiment, cfg, mesh)
  active = jax.ShapeDtypeStruct(state.token.shape, jnp.bool_, sharding=state.token.sharding)

  def compile_it():
    with jax.set_mesh(engine.mesh):
      return slot_engine._generate.lower(graphdef, params, state, active,
                                         num_steps=engine.decode_steps).compile()
  return compile_it


def prefill_program(experiment: Experiment, cfg: ModelConfig, mesh) -> Callable[[], Any]:
  """A thunk compiling the largest append of a step: the designer prompts (one refresh's
  environments, at most a call's rows) in the largest prefill bucket, written into the
  slots."""
  graphdef, params, state, engine = _engine_inputs(experiment, cfg, mesh)
  rows, t, length = largest_append(experiment.engine, experiment.selfplay.num_envs,
                                   engine.batch_shards)
  replicated = jax.sharding.NamedSharding(engine.mesh, jax.sharding.PartitionSpec())
  arr = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=replicated)
  sp = SlotParams.from_requests([], [], engine.max_stop_ids, rows)
  sp = jax.tree.map(lambda x: arr(x.shape, x.dtype), sp)
  args = (graphdef, params, state, arr((rows,), jnp.int32), arr((rows,), jnp.int32),
          arr((rows, t), jnp.int32), arr((rows,), jnp.int32), sp)

  def compile_it():
    with jax.set_mesh(engine.mesh):
      return slot_engine._append.lower(*args, length=length).compile()
  return compile_it


def reshard_program(experiment: Experiment, cfg: ModelConfig, mesh) -> Callable[[], Any]:
  """A thunk compiling the engine's copy of all the trainer's parameters (cast to the compute
  dtype and resharded to the inference layout: `EngineWeights.program`), as every update
  runs it with full weights and the first one with LoRA (later ones copy the adapters
  alone)."""
  engine = _engine_inputs(experiment, cfg, mesh)[3]
  params = nnx.state(abstract_model(cfg, mesh))

  def compile_it():
    with jax.set_mesh(mesh):
      return engine.weights.program(params).lower(params).compile()
  return compile_it


PROGRAMS: dict[str, Callable[..., Callable[[], Any]]] = {
    "train_step": train_step_program,
    "decode_block": decode_program,
    "prefill_append": prefill_program,
    "reshard": reshard_program,
}


def resident_bytes(experiment: Experiment, cfg: ModelConfig, mesh) -> dict[str, int]:
  """Per program, the bytes per chip that other programs keep alive beside it: the engine's
  weights copy and full-capacity decode state during the train step; the trainer's
  parameters, optimiser state and frozen reference during rollout; during the reshard (its
  arguments are the trainer's parameters, its output the new copy; the engine drops the old
  copy first) the optimiser state, reference and decode state."""
  _, params, opt_state, ref, rest = _train_inputs(experiment, cfg, mesh)
  optimiser = tpu_aot.per_chip_bytes(opt_state) + tpu_aot.per_chip_bytes(ref)
  trainer = optimiser + tpu_aot.per_chip_bytes(params) + tpu_aot.per_chip_bytes(rest)
  _, copy, decode_state, _ = _engine_inputs(experiment, cfg, mesh)
  engine = tpu_aot.per_chip_bytes(copy) + tpu_aot.per_chip_bytes(decode_state)
  return {"train_step": engine, "decode_block": trainer, "prefill_append": trainer,
          "reshard": optimiser + tpu_aot.per_chip_bytes(decode_state)}


def compile_step_programs(experiment: Experiment, slice_name: str, *,
                          model_overrides: dict[str, Any] | None = None,
                          hlo_dir: str | pathlib.Path | None = None,
                          programs: tuple[str, ...] = tuple(PROGRAMS),
                          ) -> dict[str, ProgramReport]:
  """Compiles `programs` of one step of `experiment` for TPU slice `slice_name` (a key of
  tpu_aot.SLICES) with the config's mesh; `model_overrides` replace ModelConfig fields (small
  widths and depth for tests). With `hlo_dir`, each program's HLO goes to
  <hlo_dir>/<name>.hlo.txt."""
  cfg = dataclasses.replace(experiment.model.architecture(), **(model_overrides or {}))
  mesh = make_mesh(experiment.mesh_shape, tpu_aot.slice_devices(slice_name))
  resident = resident_bytes(experiment, cfg, mesh)
  reports = {}
  for name in programs:
    program = tpu_aot.measure(PROGRAMS[name](experiment, cfg, mesh))
    reports[name] = ProgramReport(program, resident[name],
                                  tuple(tpu_aot.loop_collectives(program.hlo)))
    if hlo_dir is not None:
      out = pathlib.Path(hlo_dir)
      out.mkdir(parents=True, exist_ok=True)
      (out / f"{name}.hlo.txt").write_text(program.hlo)
  return reports


def summary(reports: dict[str, ProgramReport], slice_name: str) -> dict[str, Any]:
  """The JSON line of `plan --compile`: every program fits if its peak plus what stays
  resident beside it is within the chip's HBM."""
  hbm = tpu_aot.SLICES[slice_name].hbm_gib
  return {"topology": slice_name, "hbm_gib": hbm,
          "fits": all(r.need <= hbm * tpu_aot.GIB for r in reports.values()),
          "programs": {name: r.summary() for name, r in reports.items()}}


def compiled_report(reports: dict[str, ProgramReport], slice_name: str) -> str:
  """Human-readable lines: memory per program against HBM, and its largest loop collectives."""
  hbm = tpu_aot.SLICES[slice_name].hbm_gib * tpu_aot.GIB
  g = lambda n: f"{n / tpu_aot.GIB:7.2f} GiB"
  lines = [f"compiled for {slice_name} by XLA's TPU compiler (per chip, HBM {g(hbm)}):"]
  for name, r in reports.items():
    p = r.program
    verdict = "fits" if r.need <= hbm else "does NOT fit"
    if p.refused:
      lines.append(f"  {name:15s} refused by the compiler: temporaries alone need {g(p.temp)} "
                   f"(does NOT fit); after {p.compile_s:.0f} s")
      continue
    lines.append(f"  {name:15s} arguments {g(p.argument)}  temp {g(p.temp)}  output "
                 f"{g(p.output - p.alias)}  peak {g(p.peak)} + resident {g(r.resident)} = "
                 f"{g(r.need)} ({verdict}); compiled in {p.compile_s:.0f} s")
    if not r.loop_collectives:
      lines.append(f"      collectives: {r.moved / 2**20:.1f} MiB")
    for op, shapes, count, size, chips in _largest(r.loop_collectives):
      lines.append(f"      in loop: {count} x {op} {list(shapes)} ({size / 2**20:.1f} MiB, "
                   f"groups of {chips or 'all'} chips)")
  return "\n".join(lines)


def _largest(found: tuple[tpu_aot.Collective, ...], top: int = 5):
  """The `top` largest distinct (op, shapes, chips a group) among loop collectives, with
  their counts (chips 0: the HLO names no groups, i.e. all chips)."""
  counts: dict[tuple, list[int]] = {}
  for c in found:
    chips = max((len(g) for g in c.groups), default=0)
    counts.setdefault((c.op, c.shapes, chips), [0, c.bytes])[0] += 1
  ranked = sorted(counts.items(), key=lambda kv: -kv[1][1])[:top]
  return [(op, shapes, n, size, chips) for (op, shapes, chips), (n, size) in ranked]
