"""The project's programs judged by XLA's TPU compiler, run deviceless (spade_jax.tpu_aot).

Small widths and depth keep each compile to seconds; `plan --compile` runs the same code at
full depth (bench/RESULTS.md).
"""

import functools
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spade_jax import config_schema, tpu_aot
from spade_jax.model.attention_impl import resolve_attention_impl
from spade_jax.model.kv_cache import key_entry_axis
from spade_jax.model.platform import current_platform
from spade_jax.model.sharding import make_mesh
from spade_jax.plan_compile import compile_step_programs

pytestmark = pytest.mark.skipif(not tpu_aot.libtpu_available(),
                                reason="libtpu (requirements-test.txt) is not installed")

# A Qwen3 of distinct small sizes, so a collective's shape says what it carries.
VOCAB = 4096
SMALL = dict(num_layers=1, hidden_size=256, intermediate_size=768, num_heads=4, num_kv_heads=2,
             head_dim=64, vocab_size=VOCAB)


def _experiment(name: str, *overrides: str):
  config, _ = config_schema.parse_config_args(["plan", "--config", name, *overrides],
                                              flags.FlagValues())
  return config_schema.validate(config, files=False)


def test_loop_collectives_finds_a_gather_in_a_loop_body_and_not_one_hoisted_out():
  devices = tpu_aot.slice_devices("v5e-8")
  mesh = Mesh(np.array(devices), ("x",))
  w = jax.ShapeDtypeStruct((512, 8192), jnp.bfloat16, sharding=NamedSharding(mesh,
                                                                             PartitionSpec("x")))
  h = jax.ShapeDtypeStruct((16, 64, 512), jnp.bfloat16,
                           sharding=NamedSharding(mesh, PartitionSpec(None, "x")))  # rows

  def in_loop(w, h):
    return jax.lax.map(lambda hc: jax.nn.logsumexp(hc @ w, -1), h).sum()

  def hoisted(w, h):
    whole = jax.lax.with_sharding_constraint(w, NamedSharding(mesh, PartitionSpec()))
    return jax.lax.map(lambda hc: jax.nn.logsumexp(hc @ whole, -1), h).sum()

  found = tpu_aot.loop_collectives(tpu_aot.compile_program(jax.grad(in_loop), (w, h)).hlo)
  assert [(c.op, c.shapes, c.bytes) for c in found] == [("all-gather", ((512, 8192),),
                                                         512 * 8192 * 2)]
  program = tpu_aot.compile_program(jax.grad(hoisted), (w, h))
  assert tpu_aot.loop_collectives(program.hlo) == []
  assert any(c.op == "all-gather" for c in tpu_aot.collectives(program.hlo))


_PAIRS = ((0, 4), (1, 5), (2, 6), (3, 7))
_HALVES = ((0, 1, 2, 3), (4, 5, 6, 7))


@pytest.mark.parametrize(("text", "groups"), [
    ("replica_groups={{0,1,2,3},{4,5,6,7}}, use", _HALVES),
    ("replica_groups=[2,4]<=[8], use", _HALVES),
    ("replica_groups=[4,2]<=[2,4]T(1,0), use", _PAIRS),
    ("replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}, use", _HALVES),
    ("replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, use", _PAIRS),
    ("replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4], device_ids=([4,2]T(1,0)) "
     "{'axis_0'}", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("source_target_pairs={{3,0},{7,4}}, metadata", ((3, 0), (7, 4))),
    ("replica_groups={}, use", ())])
def test_device_groups_reads_each_spelling_of_xla_s_groups(text, groups):
  assert tpu_aot.device_groups(text) == groups


def test_the_platform_switch_follows_a_tpu_mesh_on_a_cpu_host():
  mesh = make_mesh({"fsdp": -1}, tpu_aot.slice_devices("v5e-8"))
  assert current_platform() == "cpu"
  with jax.set_mesh(mesh):
    assert current_platform() == "tpu"
    assert resolve_attention_impl("auto", "bfloat16") == "pallas_tpu"
    assert key_entry_axis() == 2


@functools.cache
def _lora_train_step(num_layers: int):
  """games_lora's train step at SMALL widths and `num_layers`, compiled for a v5e-8 once per
  test session (the two tests below share the two-layer one)."""
  experiment = _experiment("games_lora.py", "--config.engine.max_cache_len=1024",
                           "--config.engine.prefill_buckets=(256,)")
  return compile_step_programs(experiment, "v5e-8", programs=("train_step",),
                               model_overrides=dict(SMALL, num_layers=num_layers))["train_step"]


def test_the_train_step_gathers_no_vocabulary_table_in_a_loop():
  """The log-prob chunks compute vocabulary-parallel logits: on main before this the LoRA
  step on a v5e-8 all-gathered the [V, D] table in three loop bodies (reference forward,
  policy forward, backward)."""
  report = _lora_train_step(2)
  vocab_sized = [c for c in report.loop_collectives
                 if any(VOCAB in shape for shape in c.shapes)]
  assert vocab_sized == []
  # What crosses chips inside the chunk loop is [B, C, D]-sized: rows' hidden states.
  assert max(c.bytes for c in report.loop_collectives) < VOCAB * SMALL["hidden_size"] * 2


_DOT = re.compile(r"= \S+ (dot|convolution)\(")


@pytest.mark.slow  # an 8-layer TPU compile; tests/model/test_scan_layers.py checks the scan on CPU
def test_the_train_step_runs_its_layers_in_one_loop():
  """The decoder layers compile as one loop: unrolled layers repeat every layer's body in the
  HLO (about four times the dots at four times the depth, and as much more compile time);
  layers under a scan keep one body."""
  shallow, deep = _lora_train_step(2).program, _lora_train_step(8).program
  dots = [len(_DOT.findall(p.hlo)) for p in (shallow, deep)]
  print(f"train step on v5e-8: dots {dots[0]} at 2 layers, {dots[1]} at 8; compile "
        f"{shallow.compile_s:.1f} s at 2 layers, {deep.compile_s:.1f} s at 8")
  assert dots[1] == dots[0]  # one layer body whatever the depth
  assert deep.compile_s < 2 * shallow.compile_s + 5


def test_an_append_holds_no_query_by_key_scores():
  """Four designer prompts of a 1,024-token piece appended over 1,536 cache entries on a v5e-8
  (fsdp 8). Before the blocked cached attention the einsum held fp32 scores [rows, K, T, G, S]:
  0.123 GiB of temp a chip at these sizes. Now 512 x 512 score tiles, and the rows split
  only over the data axis (none here: the engine's copy splits the heads instead,
  sharding.INFERENCE_RULES), so no padding rows are computed."""
  t, s = 1024, 1536
  experiment = _experiment("games_lora.py", "--config.selfplay.num_envs=4",
                           "--config.engine.max_cache_len=2048",
                           f"--config.engine.prefill_buckets=({t},)",
                           f"--config.engine.append_lengths=({s},)",
                           f"--config.engine.prefill_tokens={4 * t}")
  report = compile_step_programs(experiment, "v5e-8", model_overrides=dict(SMALL, head_dim=128),
                                 programs=("prefill_append",))["prefill_append"]
  hlo = report.program.hlo
  f32 = {tuple(int(d) for d in dims.split(",")) for dims in re.findall(r"f32\[([\d,]+)\]", hlo)}
  assert not [shape for shape in f32 if t in shape and s in shape]
  assert re.search(rf"bf16\[4,{t},{SMALL['hidden_size']}\]", hlo)  # the 4 rows, unpadded
  assert not re.search(rf"\[8,{t},{SMALL['hidden_size']}\]", hlo)
  assert report.program.temp < 0.02 * tpu_aot.GIB, report.program.temp


# Heads of 128 (TPU tiles) and enough of them to split over the chips; distinct sizes again.
TILED = dict(SMALL, hidden_size=512, intermediate_size=1536, num_heads=8, num_kv_heads=4,
             head_dim=128)


@pytest.mark.parametrize(("config", "topology", "replica_chips"),
                         [("games_8b.py", "v5p-8", 2), ("games_lora.py", "v5e-8", 0)])
def test_the_decode_loop_gathers_no_weight(config, topology, replica_chips):
  """The engine samples from its own copy of the weights (engine/weights.py), split over
  the chips on every dimension but the model width: a decode step moves activations only.
  Sampling from the trainer's FSDP-sharded parameters gathered every weight ([D, F], [V, D],
  [D, N, Hd], ...) at every step. v5e-8's 8 chips hold one copy and cannot split the 4 kv
  heads: they split the cache's slots instead. On v5p-8 two replicas of 2 chips each hold a
  copy (engine.replica_chips): every collective of the loop stays within a replica but the
  while loops' flags (u32 scalars: whether any slot still decodes), which all chips share."""
  experiment = _experiment(config, "--config.engine.max_cache_len=1024",
                           "--config.engine.prefill_buckets=(256,)",
                           f"--config.engine.replica_chips={replica_chips}")
  report = compile_step_programs(experiment, topology, model_overrides=TILED,
                                 programs=("decode_block",))["decode_block"]
  d = TILED["hidden_size"]
  others = {TILED["intermediate_size"], VOCAB, TILED["num_heads"], TILED["num_kv_heads"],
            TILED["head_dim"]}
  weight_shaped = [c for c in report.loop_collectives if c.op == "all-gather"
                   and any(d in shape and others & set(shape) for shape in c.shapes)]
  assert weight_shaped == []
  assert report.loop_collectives  # the reductions of the split matmuls' outputs
  assert max(c.bytes for c in report.loop_collectives) < d * TILED["intermediate_size"] * 2
  if replica_chips:
    replica = lambda group: {chip // replica_chips for chip in group}
    across = [c for c in report.loop_collectives
              if not c.groups or any(len(replica(g)) > 1 for g in c.groups)]
    assert all(c.shapes == ((),) * len(c.shapes) for c in across), across


def _entry_outputs(hlo: str) -> list[str]:
  """The per-device shapes of a compiled program's outputs (its entry computation layout),
  e.g. ["s32[32,1280]", "f32[32]"]."""
  outputs = re.split(r"\)\}, [a-z_]+=", hlo.splitlines()[0].split(")->(", 1)[1])[0]
  return re.findall(r"\b[a-z]+\d*\[[\d,]*\]", outputs)


@pytest.mark.slow  # two compiles; tests/engine/test_engine_overlap.py checks it on a CPU mesh
def test_every_chip_gets_the_whole_block_and_first_tokens_of_a_split_state():
  """With two replicas (data 2) the decode state's rows split over them, but what the host
  reads (a block's tokens, log-probs and valid flags; an append's first tokens) comes out
  whole on every chip (slot_engine._for_host), so each host reads its own copy with no
  collective. Without it the compiled outputs were the split rows: s32[16,32], s32[16]."""
  experiment = _experiment("games_lora.py", "--config.mesh.data=2",
                           "--config.engine.max_cache_len=1024",
                           "--config.engine.prefill_buckets=(256,)")
  reports = compile_step_programs(experiment, "v5e-8", model_overrides=TILED,
                                  programs=("decode_block", "prefill_append"))
  rows, steps = experiment.engine.num_slots, experiment.engine.decode_steps_per_poll
  decode = _entry_outputs(reports["decode_block"].program.hlo)
  assert f"s32[{rows // 2},1280]" in decode  # the state's rows: split over the replicas
  assert decode[-3:] == [f"{dtype}[{rows},{steps}]" for dtype in ("s32", "f32", "pred")], decode
  append = _entry_outputs(reports["prefill_append"].program.hlo)
  assert append[-2:] == [f"s32[{rows}]", f"f32[{rows}]"], append


@pytest.mark.slow  # four TPU compiles in a subprocess; `make test` compiles each in-process
def test_plan_compile_runs_end_to_end_and_ends_in_one_json_line(tmp_path):
  env = dict(os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1")
  env.pop("JAX_PLATFORMS", None)  # the command keeps the CPU itself on a host without chips
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run([sys.executable, "-m", "spade_jax.plan", "--config", "smoke.py",
                         "--topology", "v5e-1", "--compile", "--hlo_dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=600, env=env, check=False,
                        cwd=config_schema.REPO_ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["topology"] == "v5e-1" and summary["hbm_gib"] == 16 and summary["fits"]
  assert set(summary["programs"]) == {"train_step", "decode_block", "prefill_append",
                                      "reshard"}
  for figures in summary["programs"].values():
    assert {"peak_gib", "temp_gib", "argument_gib", "compile_s"} <= set(figures)
    assert figures["peak_gib"] > 0
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      "decode_block.hlo.txt", "prefill_append.hlo.txt", "reshard.hlo.txt", "train_step.hlo.txt"]
  assert "compiled for v5e-1 by XLA's TPU compiler" in proc.stdout


def test_plan_compile_refuses_a_mesh_the_slice_cannot_hold_in_one_line():
  env = dict(os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1")
  proc = subprocess.run([sys.executable, "-m", "spade_jax.plan", "--config", "smoke.py",
                         "--topology", "v5e-8", "--compile"], capture_output=True, text=True,
                        timeout=300, env=env, check=False, cwd=config_schema.REPO_ROOT)
  assert proc.returncode == 1 and proc.stdout == ""
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert errors == ["error: config.mesh on v5e-8: mesh config {'data': 1, 'fsdp': 1, "
                    "'tensor': 1, 'expert': 1} needs 1 devices, 8 available"]
  assert "Traceback" not in proc.stderr


def test_libtpu_on_a_host_without_chips_starts_jax_quietly_on_the_cpu():
  """Installed for the deviceless compiles, libtpu would make jax start the TPU runtime on
  this CPU host, which prints errors before falling back to the CPU."""
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
  proc = subprocess.run([sys.executable, "-c", "import spade_jax, jax; print(jax.devices())"],
                        capture_output=True, text=True, timeout=120, env=env, check=True)
  assert proc.stdout.strip() == "[CpuDevice(id=0)]" and proc.stderr == ""


@pytest.mark.parametrize("topology, mode", [("v5p-8", "batch"), ("v5e-8", None)])
def test_paged_decode_uses_both_tensorcores_of_a_megacore_chip(topology, mode, monkeypatch):
  """The decode block compiled for a slice: on v5p (two TensorCores a chip) the Pallas paged
  kernel splits its sequences between them; on v5e (one) it does not ask for it."""
  from jax.experimental.pallas.ops.tpu import paged_attention as module  # noqa: PLC0415
  modes, kernel = [], module.paged_attention
  monkeypatch.setattr(module, "paged_attention", lambda *a, **kw: modes.append(
      kw.get("megacore_mode")) or kernel(*a, **kw))
  experiment = _experiment("games_lora.py", "--config.engine.max_cache_len=1024",
                           "--config.engine.prefill_buckets=(256,)")
  report = compile_step_programs(experiment, topology, model_overrides=dict(SMALL, head_dim=128),
                                 programs=("decode_block",))["decode_block"]
  assert report.program.peak > 0 and modes and set(modes) == {mode}
