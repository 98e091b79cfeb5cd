"""Logits parity with transformers on random Qwen3 / Qwen3-MoE checkpoints written here (fp32)."""

import json

import jax
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from spade_jax.model import hf_io, make_mesh
from tests.hf_random import randomize

TOL = 1e-4
VOCAB = 96
IDS = np.random.RandomState(0).randint(0, VOCAB, size=(2, 11))

DENSE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, intermediate_size=48, rope_theta=50_000.0,
             rms_norm_eps=1e-5)
MOE = dict(DENSE, num_hidden_layers=3, moe_intermediate_size=16, num_experts=6,
           num_experts_per_tok=2, mlp_only_layers=[1])


@nnx.jit
def _forward(model, ids):
  return model(ids)


def _torch_logits(model) -> np.ndarray:
  with torch.no_grad():
    return model(torch.tensor(IDS)).logits.float().numpy()


def _write(tmp_path_factory, name, cls, seed, max_shard_size=None, **config):
  """Writes a random transformers checkpoint; returns (directory, reference logits)."""
  config_cls = transformers.Qwen3MoeConfig if cls == "moe" else transformers.Qwen3Config
  model_cls = (transformers.Qwen3MoeForCausalLM if cls == "moe"
               else transformers.Qwen3ForCausalLM)
  torch.manual_seed(seed)
  model = randomize(model_cls(config_cls(**config)), seed)
  directory = tmp_path_factory.mktemp(name)
  kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
  model.save_pretrained(directory, **kwargs)
  logits = _torch_logits(model)
  assert 1.0 < np.abs(logits).max() < 100.0, "weights too small/large for a meaningful test"
  return directory, logits


def _to_v4_layout(directory):
  """Rewrites config.json with transformers-4 field names (as on the hub)."""
  path = directory / "config.json"
  cfg = json.loads(path.read_text())
  cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]
  cfg["torch_dtype"] = cfg.pop("dtype")
  if "num_local_experts" in cfg:
    cfg["num_experts"] = cfg.pop("num_local_experts")
  path.write_text(json.dumps(cfg))
  return directory


CASES = {
    "dense_untied": ("dense", dict(DENSE, tie_word_embeddings=False), {}),
    "dense_tied_head_dim": ("dense", dict(DENSE, head_dim=16, tie_word_embeddings=True), {}),
    "dense_sharded_files": ("dense", dict(DENSE), {"max_shard_size": "20KB"}),
    "moe_dense_layers": ("moe", dict(MOE, norm_topk_prob=True), {}),
    "moe_no_topk_norm_v4": ("moe", dict(MOE, norm_topk_prob=False, decoder_sparse_step=1), {}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  out = {}
  for seed, (name, (cls, config, kwargs)) in enumerate(CASES.items()):
    out[name] = _write(tmp_path_factory, name, cls, seed, **kwargs, **config)
  _to_v4_layout(out["moe_no_topk_norm_v4"][0])
  return out


@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_transformers(checkpoints, name):
  directory, expected = checkpoints[name]
  if name == "dense_sharded_files":
    assert (directory / "model.safetensors.index.json").exists()
    assert len(list(directory.glob("model-*.safetensors"))) > 1
  if name == "moe_no_topk_norm_v4":
    assert "num_experts" in json.loads((directory / "config.json").read_text())
  model = hf_io.from_pretrained(directory, dtype="float32")
  np.testing.assert_allclose(np.asarray(_forward(model, IDS)), expected, rtol=0, atol=TOL)


def test_load_into_mesh_places_shards(checkpoints):
  directory, expected = checkpoints["moe_dense_layers"]
  mesh = make_mesh({"data": 1, "fsdp": 2, "tensor": 2, "expert": 2})
  model = hf_io.from_pretrained(directory, dtype="float32", mesh=mesh)
  experts = model.groups[0].mlp.gate_proj.kernel[...]  # [L_g, E, D, F] (layer 0's group)
  assert experts.sharding.spec == jax.sharding.PartitionSpec(None, "expert", "fsdp", "tensor")
  assert len(experts.addressable_shards) == 8
  with jax.set_mesh(mesh):
    logits = _forward(model, IDS)
  np.testing.assert_allclose(np.asarray(logits), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("name,layout,shard_bytes", [
    ("dense_tied_head_dim", "transformers5", 1 << 30),
    ("dense_untied", "transformers4", 30_000),
    ("moe_dense_layers", "transformers5", 1 << 30),
    ("moe_no_topk_norm_v4", "transformers4", 50_000),
])
def test_save_then_transformers_loads_same_logits(checkpoints, tmp_path, name, layout,
                                                  shard_bytes):
  directory, expected = checkpoints[name]
  files = hf_io.save_pretrained(hf_io.from_pretrained(directory, dtype="float32"), tmp_path,
                                max_shard_bytes=shard_bytes, layout=layout)
  assert (len(files) > 1) == (shard_bytes < 1 << 20)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
  np.testing.assert_allclose(_torch_logits(reloaded.eval()), expected, rtol=0, atol=TOL)
  # And back into spade_jax from our own files.
  ours = hf_io.from_pretrained(tmp_path, dtype="float32")
  np.testing.assert_allclose(np.asarray(_forward(ours, IDS)), expected, rtol=0, atol=TOL)


def test_bfloat16_roundtrip_is_exact(checkpoints, tmp_path):
  """bf16 load, save, load: identical parameters (casting happens once, on load)."""
  directory, _ = checkpoints["dense_untied"]
  model = hf_io.from_pretrained(directory)  # default dtype bfloat16
  hf_io.save_pretrained(model, tmp_path)
  again = hf_io.from_pretrained(tmp_path, dtype=None)  # keep the file's dtype
  assert again.cfg.param_dtype == "bfloat16"
  for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(again), strict=True):
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
