"""Bad checkpoints fail early with an error naming the file and the field or tensor."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import Qwen3, get_preset, hf_config, hf_io, hf_safetensors

CFG = get_preset("tiny-moe", num_layers=2)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
  """A valid checkpoint written by save_pretrained, once as one file and once sharded."""
  root = tmp_path_factory.mktemp("good")
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Qwen3(CFG, rngs=nnx.Rngs(0))))
  rng = np.random.RandomState(0)  # numpy init: eager jax.random init costs seconds of compiles
  model = nnx.merge(graphdef, jax.tree.map(
      lambda s: jnp.asarray(rng.normal(0, 0.1, s.shape), s.dtype), state))
  hf_io.save_pretrained(model, root / "single")
  hf_io.save_pretrained(model, root / "sharded", max_shard_bytes=100_000)
  return root


def _copy(good, tmp_path, kind="single"):
  return shutil.copytree(good / kind, tmp_path / kind)


def _rewrite(path, drop=None, reshape=None, add=None):
  """Rewrites a safetensors file without tensor `drop`, with `reshape` = (name, shape) zeroed
  to a new shape, or with `add` = (name, array) added."""
  reader = hf_safetensors.CheckpointReader(path.parent)
  tensors = []
  if add:
    tensors.append(hf_safetensors.PendingTensor(add[0], add[1].shape, add[1].dtype,
                                                lambda: add[1]))
  for name in sorted(reader.names()):
    value = reader.read(name)
    if name == drop:
      continue
    if reshape and name == reshape[0]:
      value = np.zeros(reshape[1], value.dtype)
    tensors.append(hf_safetensors.PendingTensor(name, value.shape, value.dtype,
                                                lambda v=value: v))
  hf_safetensors.write_file(path, tensors, {"format": "pt"})


def test_good_checkpoint_loads(good):
  for kind in ("single", "sharded"):
    model = hf_io.from_pretrained(good / kind, dtype="float32")
    assert model.cfg.replace(param_dtype="float32") == CFG.replace(max_position_embeddings=4096)


def test_missing_config(good, tmp_path):
  d = _copy(good, tmp_path)
  (d / "config.json").unlink()
  with pytest.raises(hf_config.CheckpointFileNotFoundError, match=r"config\.json"):
    hf_io.from_pretrained(d)


def test_missing_directory(tmp_path):
  with pytest.raises(hf_config.CheckpointFileNotFoundError, match="not a checkpoint directory"):
    hf_io.from_pretrained(tmp_path / "nope")


@pytest.mark.parametrize("field,value,match", [
    ("model_type", "llama", r"config\.json: field 'model_type' is 'llama'"),
    ("hidden_size", None, r"config\.json: required field 'hidden_size' is missing"),
    ("num_hidden_layers", "2", r"config\.json: field 'num_hidden_layers' must be"),
    ("attention_bias", True, r"config\.json: field 'attention_bias'"),
    ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e6}, "rope_type 'yarn'"),
])
def test_bad_config_field(good, tmp_path, field, value, match):
  d = _copy(good, tmp_path)
  cfg = json.loads((d / "config.json").read_text())
  cfg[field] = value
  (d / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(hf_config.ConfigFieldError, match=match):
    hf_io.from_pretrained(d)


def test_config_not_json(good, tmp_path):
  d = _copy(good, tmp_path)
  (d / "config.json").write_text("{not json")
  with pytest.raises(hf_config.CorruptFileError, match=r"config\.json: not valid JSON"):
    hf_io.from_pretrained(d)


def test_missing_tensor(good, tmp_path):
  d = _copy(good, tmp_path)
  name = "model.layers.1.mlp.experts.3.up_proj.weight"
  _rewrite(d / "model.safetensors", drop=name)
  with pytest.raises(hf_config.MissingTensorError, match=rf"tensor '{name}' is in none of"):
    hf_io.from_pretrained(d)


def test_wrong_tensor_shape(good, tmp_path):
  d = _copy(good, tmp_path)
  name = "model.layers.0.self_attn.k_proj.weight"
  _rewrite(d / "model.safetensors", reshape=(name, (16, 64)))
  with pytest.raises(hf_config.TensorShapeError,
                     match=rf"model\.safetensors: tensor '{name}' has shape \[16, 64\]; .*"
                           r"config\.json implies \[32, 64\]"):
    hf_io.from_pretrained(d)


def test_unexpected_tensor(good, tmp_path):
  """Tensors the config does not explain (here an attention bias) are not silently dropped."""
  d = _copy(good, tmp_path)
  name = "model.layers.0.self_attn.q_proj.bias"
  _rewrite(d / "model.safetensors", add=(name, np.zeros(64, np.float32)))
  with pytest.raises(hf_config.CheckpointError, match=rf"do not belong .*'{name}'"):
    hf_io.from_pretrained(d)


def test_truncated_file(good, tmp_path):
  d = _copy(good, tmp_path, "sharded")
  shard = sorted(d.glob("model-*.safetensors"))[-1]
  shard.write_bytes(shard.read_bytes()[:-100])
  with pytest.raises(hf_config.CorruptFileError, match=rf"{shard.name}: tensor '.*' .*truncated"):
    hf_io.from_pretrained(d)


def test_truncated_header(good, tmp_path):
  d = _copy(good, tmp_path)
  path = d / "model.safetensors"
  path.write_bytes(path.read_bytes()[:200])
  with pytest.raises(hf_config.CorruptFileError, match=r"model\.safetensors: header claims"):
    hf_io.from_pretrained(d)


@pytest.mark.parametrize("content,match", [
    ("{oops", r"model\.safetensors\.index\.json: not valid JSON"),
    ({"metadata": {}}, r"index\.json: field 'weight_map'"),
    ("misplaced", r"index\.json: lists tensor 'model\.norm\.weight' in model-00001-of"),
])
def test_unreadable_index(good, tmp_path, content, match):
  d = _copy(good, tmp_path, "sharded")
  index = d / "model.safetensors.index.json"
  if content == "misplaced":  # the index names a shard that does not hold the tensor
    content = json.loads(index.read_text())
    content["weight_map"]["model.norm.weight"] = sorted(d.glob("model-*.safetensors"))[0].name
  index.write_text(content if isinstance(content, str) else json.dumps(content))
  with pytest.raises(hf_config.CorruptFileError, match=match):
    hf_io.from_pretrained(d)


def test_index_names_missing_shard(good, tmp_path):
  d = _copy(good, tmp_path, "sharded")
  shard = sorted(d.glob("model-*.safetensors"))[0]
  shard.unlink()
  with pytest.raises(hf_config.CheckpointFileNotFoundError, match=shard.name):
    hf_io.from_pretrained(d)
