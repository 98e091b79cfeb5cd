"""Hugging Face `config.json` <-> ModelConfig for Qwen3 and Qwen3-MoE, and checkpoint errors.

Both layouts are read: transformers 4 (top-level `rope_theta`, `num_experts`, `torch_dtype`)
and transformers 5 (`rope_parameters.rope_theta`, `num_local_experts`, `dtype`). Missing
optional fields take transformers' own defaults for the model type, so a config means here
what it means there. Features this model does not implement (attention bias, sliding window,
rope scaling, another activation) are refused by name rather than silently ignored.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from spade_jax.model.config import ModelConfig

MODEL_TYPES = ("qwen3", "qwen3_moe")
_ARCHITECTURES = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
_REQUIRED = object()


class CheckpointError(ValueError):
  """A Hugging Face checkpoint cannot be read; the message names the file and the field/tensor."""


class CheckpointFileNotFoundError(CheckpointError, FileNotFoundError):
  """A file the checkpoint needs (config.json, a shard, the weights) is absent."""


class ConfigFieldError(CheckpointError):
  """config.json: unknown model_type, missing or ill-typed field, or an unsupported feature."""


class MissingTensorError(CheckpointError):
  """A tensor the model needs is in no safetensors file of the checkpoint."""


class TensorShapeError(CheckpointError):
  """A tensor's shape (or dtype) differs from what config.json implies."""


class CorruptFileError(CheckpointError):
  """A safetensors file is truncated or malformed, or the shard index is unreadable."""


def read_json(path: pathlib.Path) -> dict[str, Any]:
  """Reads a JSON object, with errors naming the file."""
  if not path.is_file():
    raise CheckpointFileNotFoundError(f"{path}: file not found")
  try:
    data = json.loads(path.read_text(encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise CorruptFileError(f"{path}: not valid JSON ({e})") from e
  if not isinstance(data, dict):
    raise CorruptFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
  return data


def write_json(path: pathlib.Path, data: dict[str, Any]) -> None:
  """Writes a JSON object atomically (temporary file + rename)."""
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
  tmp.replace(path)


def _field(hf: dict[str, Any], key: str, source: pathlib.Path, kind: type | tuple[type, ...],
           default: Any = _REQUIRED) -> Any:
  value = hf.get(key)
  if value is None:
    if default is _REQUIRED:
      raise ConfigFieldError(f"{source}: required field {key!r} is missing")
    return default
  if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
    raise ConfigFieldError(f"{source}: field {key!r} must be {kind}, got {value!r}")
  return value


def _one_of(hf: dict[str, Any], keys: tuple[str, str], source: pathlib.Path,
            kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
  """A field spelled differently by transformers 4 and 5 (e.g. num_experts/num_local_experts)."""
  present = {k: hf[k] for k in keys if hf.get(k) is not None}
  if len(set(map(repr, present.values()))) > 1:
    raise ConfigFieldError(f"{source}: fields {keys} disagree: {present}")
  key = next(iter(present), keys[0])
  return _field(hf, key, source, kind, default)


def _rope_theta(hf: dict[str, Any], source: pathlib.Path) -> float:
  params = hf.get("rope_parameters")
  if params is not None and not isinstance(params, dict):
    raise ConfigFieldError(f"{source}: field 'rope_parameters' must be an object, got {params!r}")
  scaling = hf.get("rope_scaling") or {}
  rope_type = ((params or {}).get("rope_type") or scaling.get("rope_type")
               or scaling.get("type"))
  if rope_type not in (None, "default"):
    raise ConfigFieldError(f"{source}: rope_type {rope_type!r} is not supported (only 'default')")
  if params is not None and params.get("rope_theta") is not None:
    return float(_field(params, "rope_theta", source, (int, float)))
  return float(_field(hf, "rope_theta", source, (int, float), 10_000.0))


def _refuse_unsupported(hf: dict[str, Any], source: pathlib.Path) -> None:
  if hf.get("attention_bias"):
    raise ConfigFieldError(f"{source}: field 'attention_bias' is true; Qwen3 here has no biases")
  if hf.get("use_sliding_window"):
    raise ConfigFieldError(f"{source}: field 'use_sliding_window' is true; not supported")
  if hf.get("hidden_act", "silu") != "silu":
    raise ConfigFieldError(f"{source}: field 'hidden_act' is {hf['hidden_act']!r}; "
                           "only 'silu' is supported")
  layer_types = hf.get("layer_types") or []
  if any(t != "full_attention" for t in layer_types):
    raise ConfigFieldError(f"{source}: field 'layer_types' has non-full attention "
                           f"{sorted(set(layer_types))}; not supported")


def checkpoint_dtype(hf: dict[str, Any]) -> str:
  """The dtype the checkpoint says it holds ('dtype' or 'torch_dtype'), default float32."""
  value = hf.get("dtype") or hf.get("torch_dtype") or "float32"
  return str(value).removeprefix("torch.")


def config_from_hf(hf: dict[str, Any], source: pathlib.Path, dtype: str) -> ModelConfig:
  """Maps a parsed config.json to a ModelConfig with params and compute in `dtype`."""
  model_type = hf.get("model_type")
  if model_type not in MODEL_TYPES:
    raise ConfigFieldError(f"{source}: field 'model_type' is {model_type!r}; expected one of "
                           f"{MODEL_TYPES}")
  _refuse_unsupported(hf, source)
  hidden = _field(hf, "hidden_size", source, int)
  heads = _field(hf, "num_attention_heads", source, int)
  fields: dict[str, Any] = dict(
      vocab_size=_field(hf, "vocab_size", source, int),
      hidden_size=hidden,
      num_layers=_field(hf, "num_hidden_layers", source, int),
      num_heads=heads,
      num_kv_heads=_field(hf, "num_key_value_heads", source, int, heads),
      head_dim=_field(hf, "head_dim", source, int, hidden // heads),
      intermediate_size=_field(hf, "intermediate_size", source, int),
      rms_norm_eps=float(_field(hf, "rms_norm_eps", source, (int, float), 1e-6)),
      rope_theta=_rope_theta(hf, source),
      tie_word_embeddings=_field(hf, "tie_word_embeddings", source, bool, False),
      max_position_embeddings=_field(hf, "max_position_embeddings", source, int, 32_768),
      param_dtype=dtype, compute_dtype=dtype)
  if model_type == "qwen3_moe":
    fields.update(
        num_experts=_one_of(hf, ("num_experts", "num_local_experts"), source, int),
        num_experts_per_tok=_field(hf, "num_experts_per_tok", source, int),
        moe_intermediate_size=_field(hf, "moe_intermediate_size", source, int),
        norm_topk_prob=_field(hf, "norm_topk_prob", source, bool, False),
        decoder_sparse_step=_field(hf, "decoder_sparse_step", source, int, 1),
        mlp_only_layers=tuple(_field(hf, "mlp_only_layers", source, list, [])))
  try:
    return ModelConfig(**fields)
  except (ValueError, TypeError) as e:
    raise ConfigFieldError(f"{source}: inconsistent fields ({e})") from e


def config_to_hf(cfg: ModelConfig, dtype: str, layout: str = "transformers5") -> dict[str, Any]:
  """config.json contents for `cfg` in the transformers 5 (default) or 4 layout."""
  if layout not in ("transformers4", "transformers5"):
    raise ValueError(f"layout must be 'transformers4' or 'transformers5', got {layout!r}")
  v5 = layout == "transformers5"
  model_type = "qwen3_moe" if cfg.is_moe else "qwen3"
  hf: dict[str, Any] = {
      "architectures": [_ARCHITECTURES[model_type]], "model_type": model_type,
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
      "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
      "head_dim": cfg.head_dim, "hidden_act": "silu",
      "max_position_embeddings": cfg.max_position_embeddings, "rms_norm_eps": cfg.rms_norm_eps,
      "tie_word_embeddings": cfg.tie_word_embeddings, "attention_bias": False,
      "attention_dropout": 0.0, "use_sliding_window": False, "use_cache": True,
      "dtype" if v5 else "torch_dtype": dtype}
  if v5:
    hf["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
  else:
    hf["rope_theta"] = cfg.rope_theta
  if cfg.is_moe:
    hf.update({"num_local_experts" if v5 else "num_experts": cfg.num_experts,
               "num_experts_per_tok": cfg.num_experts_per_tok,
               "moe_intermediate_size": cfg.moe_intermediate_size,
               "norm_topk_prob": cfg.norm_topk_prob,
               "decoder_sparse_step": cfg.decoder_sparse_step,
               "mlp_only_layers": list(cfg.mlp_only_layers)})
  return hf
