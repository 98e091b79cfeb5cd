"""Shared set-up for the engine tests: random transformers checkpoints loaded with hf_io."""

import numpy as np
import torch
import transformers

from spade_jax.model import hf_io
from tests.hf_random import randomize

VOCAB = 128
DENSE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, intermediate_size=48, rope_theta=10_000.0,
             rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=512)
MOE = dict(DENSE, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
           mlp_only_layers=[0])


def write_checkpoint(directory, kind: str, seed: int = 0):
  """Writes a random Qwen3 ("dense") or Qwen3-MoE ("moe") checkpoint; returns (hf, ours)."""
  if kind == "moe":
    hf = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**MOE))
  else:
    hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**DENSE))
  hf = randomize(hf, seed)
  hf.save_pretrained(directory)
  return hf, hf_io.from_pretrained(directory, dtype="float32")


def hf_greedy(hf, prompt, max_new_tokens):
  """transformers' greedy generate for one prompt -> (tokens, per-step logits [N, V])."""
  out = hf.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
                    min_new_tokens=max_new_tokens, output_logits=True,
                    return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
  tokens = out.sequences[0, len(prompt):].tolist()
  return tokens, np.stack([x[0].float().numpy() for x in out.logits])


def log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))
