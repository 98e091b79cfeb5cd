"""Bad configs and bad model inputs fail early with errors that name the field."""

import pathlib
import re

import numpy as np
import pytest
from flax import nnx

from spade_jax.model import PRESETS, KVCache, Qwen3, get_preset
from spade_jax.model import config as model_config
from spade_jax.model.config import resolve_compute_dtype, resolve_remat


@pytest.mark.parametrize("changes, match", [
    (dict(num_kv_heads=3), "num_heads=4 must be a multiple of num_kv_heads=3"),
    (dict(head_dim=15), "head_dim=15 must be even"),
    (dict(num_layers=0), "num_layers=0 must be >= 1"),
    (dict(rms_norm_eps=0.0), "rms_norm_eps=0.0"),
    (dict(num_experts=4, num_experts_per_tok=5, moe_intermediate_size=8),
     r"num_experts_per_tok=5 must be in \[1, num_experts=4\]"),
    (dict(num_experts=4, num_experts_per_tok=2), "moe_intermediate_size=0 must be >= 1"),
    (dict(mlp_only_layers=(2,)), r"mlp_only_layers \[2\] outside \[0, num_layers=2\)"),
    (dict(compute_dtype="bf16"), "compute_dtype='bf16' is not a floating dtype"),
    (dict(param_dtype="int32"), "param_dtype='int32' is not a floating dtype"),
])
def test_bad_config_names_the_field(changes, match):
  with pytest.raises(ValueError, match=match):
    get_preset("tiny", **changes)


def test_unknown_preset_lists_the_known_ones():
  with pytest.raises(ValueError, match="unknown model preset 'qwen4'.*tiny"):
    get_preset("qwen4")


def test_presets_are_valid_and_moe_layers_follow_qwen3_rule():
  cfg = PRESETS["qwen3-30b-a3b"]
  assert cfg.is_moe and all(cfg.is_moe_layer(i) for i in range(cfg.num_layers))
  moe = get_preset("tiny-moe", num_layers=4, decoder_sparse_step=2, mlp_only_layers=(3,))
  assert [moe.is_moe_layer(i) for i in range(4)] == [False, True, False, False]
  assert not any(PRESETS["tiny"].is_moe_layer(i) for i in range(2))


@pytest.fixture(scope="module")
def abstract_model():
  cfg = get_preset("tiny")
  return cfg, nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0)))  # inputs are checked first


def test_bad_inputs_are_rejected_before_compute(abstract_model):
  cfg, model = abstract_model
  ids = np.zeros((2, 5), np.int32)
  with pytest.raises(ValueError, match="input_ids must be an integer array"):
    model(ids.astype(np.float32))
  with pytest.raises(ValueError, match=r"input_ids must be an integer array \[B, T\]"):
    model(ids[0])
  with pytest.raises(ValueError, match=r"attention_mask shape \(2, 4\) != input_ids shape"):
    model(ids, attention_mask=np.ones((2, 4)))
  with pytest.raises(ValueError, match="segment_ids .* cannot be combined with a KV cache"):
    model(ids, segment_ids=np.ones((2, 5)), cache=KVCache.init(cfg, 2, 8))
  with pytest.raises(ValueError, match="5 new tokens exceed the cache length 4"):
    model(ids, cache=KVCache.init(cfg, 2, 4))
  with pytest.raises(ValueError, match="cache holds 3 rows"):
    model(ids, cache=KVCache.init(cfg, 3, 8))
  with pytest.raises(ValueError, match="batch_size=0"):
    KVCache.init(cfg, 0, 8)


@pytest.mark.parametrize("platform,expected", [("cpu", "none"), ("gpu", "full"), ("tpu", "full")])
def test_auto_remat_is_chosen_per_platform(platform, expected):
  assert resolve_remat("auto", platform) == expected
  assert resolve_remat("dots", platform) == "dots"  # an explicit policy is kept everywhere


def test_auto_compute_dtype_is_bf16_only_where_the_hardware_has_bf16_dots(monkeypatch):
  for platform in ("gpu", "tpu"):
    assert resolve_compute_dtype("auto", platform) == "bfloat16"
  flags = set()
  if pathlib.Path("/proc/cpuinfo").is_file():  # this host's own flags, read apart from the code
    text = pathlib.Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.MULTILINE).group(1).split())
  native = bool(flags & {"avx512_bf16", "amx_bf16"})
  assert resolve_compute_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
  monkeypatch.setattr(model_config, "_cpu_flags", lambda: {"avx2", "avx512_bf16"})
  assert resolve_compute_dtype("auto", "cpu") == "bfloat16"
  monkeypatch.setattr(model_config, "_cpu_flags", lambda: {"avx2", "fma"})
  assert resolve_compute_dtype("auto", "cpu") == "float32"
  assert resolve_compute_dtype("bfloat16", "cpu") == "bfloat16"  # a named dtype is kept


def test_unknown_remat_is_rejected():
  with pytest.raises(ValueError, match="ModelConfig.remat='some'"):
    get_preset("tiny", remat="some")
