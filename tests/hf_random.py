"""Random weights for transformers reference models, shared by the parity tests."""

import torch


def randomize(model, seed: int):
  """Weights large enough that logits are O(1-10) and greedy choices are not near-ties."""
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if p.ndim == 1:  # norm scales near (not exactly) one
        p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
      elif "embed_tokens" in name:
        p.copy_(torch.randn(p.shape, generator=gen))
      else:
        p.copy_(torch.randn(p.shape, generator=gen) * 1.5 / p.shape[-1] ** 0.5)
  return model.eval()
