"""bench/accelerator.py sized on deviceless TPU slices (libtpu's compiler on this CPU): HBM per
chip by device kind, the compiler's refusal read as a need, the rollout engine's slots shrunk
to the compiled peak. A file of its own so that its compiles run beside the other bench tests
(pytest-xdist hands out whole files)."""

import math

import pytest

from spade_jax.model import get_preset, make_mesh

from .test_accelerator_bench import load_bench

bench = load_bench()


@pytest.fixture(name="tpu_slice")
def _tpu_slice(monkeypatch):
  """tpu_aot.slice_devices: deviceless TPU slices (libtpu's compiler on this CPU)."""
  pytest.importorskip("libtpu")
  # Another process compiling for TPU on this host may hold libtpu's lockfile; compiling
  # needs no exclusive chip access.
  monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  return bench.tpu_aot.slice_devices


@pytest.fixture(name="v5e_8")
def _v5e_8(tpu_slice):
  return tpu_slice("v5e-8")


def test_a_program_refused_for_hbm_needs_what_the_compiler_says():
  refused = lambda message: bench.tpu_aot.refused_bytes(bench.jax.errors.JaxRuntimeError(message))
  gib = bench.tpu_aot.GIB
  assert refused("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
                 "HLO temporaries (22.89G) exceeds available HBM (15.75G).") == 22.89 * gib
  assert refused("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 1.5T of "
                 "15.75G hbm.") == 1.5 * 2**40
  assert refused("RESOURCE_EXHAUSTED: out of memory") == math.inf
  with pytest.raises(bench.jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT"):
    refused("INVALID_ARGUMENT: something else")


@pytest.mark.slow  # a compile the TPU compiler refuses at 512 slots (`make test-slow`)
def test_an_engine_the_tpu_compiler_refuses_does_not_fit(tpu_slice, monkeypatch):
  """512 slots of 4224 entries (8 KV heads of 128) on one v5e chip: XLA's TPU compiler
  refuses the program for HBM at compile time; the engine's peak is what the compiler says it
  needs (> 16 GiB), so it does not fit the chip's budget instead of failing the part."""
  refusals, refused_bytes = [], bench.tpu_aot.refused_bytes
  monkeypatch.setattr(bench.tpu_aot, "refused_bytes", lambda err: refusals.append(err) or
                      refused_bytes(err))
  chip = tpu_slice("v5e-1")
  mesh = make_mesh({"fsdp": -1}, chip)
  cfg = get_preset("tiny", head_dim=128, num_heads=8, num_kv_heads=8, param_dtype="bfloat16",
                   compute_dtype="bfloat16")
  engine = bench.SlotEngine(bench.abstract_model(cfg, mesh), num_slots=512, max_cache_len=4096,
                            prefill_buckets=(128,), decode_steps=8)
  peak = bench.engine_peak(engine, 512, 128, 4096 + 128)
  # The append, and with the layers scanned the generate block too, are refused.
  assert refusals and all("RESOURCE_EXHAUSTED" in str(err) for err in refusals)
  assert 16 * bench.tpu_aot.GIB < peak < math.inf
  assert not bench.Budget(bench.chip_hbm(chip[0])).fits(peak)


def test_every_tpu_slice_has_its_hbm_by_device_kind(v5e_8):
  for name, tpu in bench.tpu_aot.SLICES.items():
    device = bench.tpu_aot.slice_devices(name)[0]
    assert bench.chip_hbm(device) == tpu.hbm_gib * bench.tpu_aot.GIB, (name, device.device_kind)


@pytest.mark.slow  # three engines compiled for a v5e-8 (`make test-slow`)
def test_rollout_shrinks_its_slots_to_the_compiled_tpu_peak(v5e_8, monkeypatch):
  """The rollout engine's programs compiled for a TPU v5e-8 (FSDP over its 8 chips, a tiny
  model with 128-wide heads for the TPU kernels): 16 slots need more than 8; a budget
  between them gets 8, one below both is refused with the smaller need."""
  monkeypatch.setattr(bench, "ROLLOUT_ENGINE", dict(max_cache_len=512, prefill_buckets=(128,)))
  peaks, compile_peak = {}, bench.engine_peak
  compile_once = lambda engine, *sizes: peaks.get(sizes) or peaks.setdefault(
      sizes, compile_peak(engine, *sizes))
  monkeypatch.setattr(bench, "engine_peak", compile_once)
  mesh = make_mesh({"fsdp": -1}, v5e_8)
  cfg = get_preset("tiny", head_dim=128, param_dtype="bfloat16", compute_dtype="bfloat16")
  hbm = bench.chip_hbm(v5e_8[0])
  assert hbm == 16 * bench.tpu_aot.GIB
  sixteen = bench.rollout_slots(cfg, mesh, 16, bench.Budget(hbm))
  eight = bench.rollout_slots(cfg, mesh, 8, bench.Budget(hbm))
  assert sixteen[0] == 16 and eight[0] == 8 and 0 < eight[1] < sixteen[1]
  between = bench.Budget((eight[1] + sixteen[1]) / 2 / bench.HBM_FILL)
  assert bench.rollout_slots(cfg, mesh, 16, between) == eight
  assert bench.rollout_slots(cfg, mesh, 16, bench.Budget(eight[1])) == (None, eight[1])

