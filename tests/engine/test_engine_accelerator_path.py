"""The engine on the accelerator path, emulated on CPU, samples what the CPU path samples."""

import jax
import numpy as np

from spade_jax.engine.generate import generate
from spade_jax.model import attention_impl, get_preset
from spade_jax.model.attention_impl import emulated_kernels
from spade_jax.model.testing import random_model


def test_engine_on_the_gpu_path_samples_what_the_cpu_path_samples(monkeypatch):
  """The whole engine as on a GPU (keys in [B, K, S, Hd], cuDNN prefill emulated, Pallas
  decode kernel in interpret mode) against the CPU path: same greedy tokens, same log-probs."""
  model = random_model(get_preset("tiny"), std=0.1)
  prompts = [list(range(3, 23)), list(range(40, 65)), [7] * 21]  # 32-token bucket, not Hd
  want = generate(model, prompts, 6, temperature=0.0, max_slots=4)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  traced = []  # the decode kernel is traced into the engine's step (not only the fallback)
  kernel = attention_impl._gpu_decode
  monkeypatch.setattr(attention_impl, "_gpu_decode", lambda *a: traced.append(1) or kernel(*a))
  gpu_model = random_model(get_preset("tiny", attention_impl="cudnn"), std=0.1)
  with emulated_kernels():
    got = generate(gpu_model, prompts, 6, temperature=0.0, max_slots=4)
  for g, w in zip(got, want, strict=True):
    assert g.tokens == w.tokens
    np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4)
  assert traced
