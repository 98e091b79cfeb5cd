"""bench/accelerator.py on CPU: the refusal, --help, and its roofline / MFU arithmetic."""

import importlib.util
import json
import pathlib

import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset

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
                if path[0] == "layers" and path[-1] == "kernel")
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
