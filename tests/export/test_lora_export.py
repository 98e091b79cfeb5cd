"""A LoRA run's adapters through `python -m spade_jax.export --adapter / --merged`: peft and
transformers load them onto the Hugging Face base and give our logits (fp32)."""

import jax
import jax.numpy as jnp
import numpy as np
import peft
import pytest
import torch
import transformers
from flax import nnx

from spade_jax import export
from spade_jax.config_schema import base_config, validate
from spade_jax.model import load_model
from spade_jax.model.hf_config import CheckpointError
from spade_jax.model.lora import LoRAParam
from spade_jax.run import build_model, build_trainer
from tests.hf_random import randomize

TOL = 1e-4
IDS = np.random.RandomState(0).randint(0, 96, size=(2, 11))
HF = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, head_dim=8, intermediate_size=48, tie_word_embeddings=False)


def _torch_logits(model) -> np.ndarray:
  with torch.no_grad():
    return model(torch.tensor(IDS)).logits.float().numpy()


def test_peft_and_merged_exports_give_our_logits(tmp_path):
  base_dir, workdir = tmp_path / "base", tmp_path / "run"
  torch.manual_seed(0)
  randomize(transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**HF)), 0).save_pretrained(
      base_dir)
  config = base_config()
  config.model.checkpoint = str(base_dir)
  config.model.lora_rank, config.model.lora_alpha = 4, 8.0
  config.model.lora_targets = ("*_proj",)
  experiment = validate(config)
  trainer = build_trainer(experiment, build_model(experiment.model, experiment.seed, None), None,
                          str(workdir))
  rng = np.random.default_rng(0)  # trained-looking adapters: B != 0
  nnx.update(trainer.policy, jax.tree.map(
      lambda x: jnp.asarray(rng.normal(0, 0.3, x.shape), x.dtype),
      nnx.state(trainer.policy, LoRAParam)))
  trainer.maybe_save(force=True)
  trainer.close()
  ours = np.asarray(trainer.policy(jnp.asarray(IDS)))
  adapter, merged = tmp_path / "adapter", tmp_path / "merged"
  export.main(["--workdir", str(workdir), "--adapter", str(adapter), "--merged", str(merged)])

  hf_base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
  base_logits = _torch_logits(hf_base)
  with_adapter = peft.PeftModel.from_pretrained(hf_base, adapter).eval()
  assert len([n for n, _ in with_adapter.named_modules() if n.endswith("lora_A")]) == 14
  np.testing.assert_allclose(_torch_logits(with_adapter), ours, atol=TOL, rtol=TOL)
  assert np.abs(ours - base_logits).max() > 0.1  # the adapters matter
  full = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
  np.testing.assert_allclose(_torch_logits(full), ours, atol=TOL, rtol=TOL)

  # The adapters are tied to their base: changed base weights are refused, naming the record.
  randomize(transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**HF)), 1).save_pretrained(
      base_dir)
  with pytest.raises(CheckpointError, match=r"lora_base.json: base .* has fingerprint \w+, the "
                                            r"adapters were trained on \w+"):
    load_model(workdir)
