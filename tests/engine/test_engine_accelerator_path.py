"""The engine on the accelerator paths, emulated on CPU, samples what the CPU path samples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.engine.generate import generate
from spade_jax.model import attention, attention_impl, get_preset
from spade_jax.model.attention_impl import emulated_kernels
from spade_jax.model.testing import random_model

_EINSUM = attention.cached_attention


def _decode_steps_poisoned(q, k, v, mask, scale):
  """The einsum fallback, NaN for one-token steps: a decode step that does not run the
  kernel would sample from NaN log-probs."""
  out = _EINSUM(q, k, v, mask, scale)
  return jnp.full_like(out, jnp.nan) if q.shape[1] == 1 else out


# GPU: cuDNN prefill emulated (fp32) and the GPU decode kernel; TPU: splash prefill and the
# paged decode kernel, which reads bf16 caches (bf16 moves log-probs by about 1e-2).
@pytest.mark.parametrize("platform,impl,dtype,atol", [
    ("gpu", "cudnn", "float32", 1e-4), ("tpu", "pallas_tpu", "bfloat16", 0.05)])
def test_engine_on_the_accelerator_path_samples_what_the_cpu_path_samples(
    platform, impl, dtype, atol, monkeypatch):
  """The whole engine as on the platform (keys in [B, K, S, Hd], the platform's prefill
  kernel emulated, its Pallas decode kernel in interpret mode) against the CPU path: same
  greedy tokens, same log-probs; every decode step runs the kernel (never the fallback)."""
  prompts = [list(range(3, 23)), list(range(40, 65)), [7] * 21]  # 32-token bucket, not Hd
  want = generate(random_model(get_preset("tiny", compute_dtype=dtype), std=0.1), prompts, 6,
                  temperature=0.0, max_slots=4)
  monkeypatch.setattr(jax, "default_backend", lambda: platform)
  monkeypatch.setattr(attention, "cached_attention", _decode_steps_poisoned)
  traced = []  # the decode kernel is traced into the engine's step
  kernel = attention_impl._DECODE_KERNELS[impl]
  monkeypatch.setitem(attention_impl._DECODE_KERNELS, impl,
                      lambda *a, **kw: traced.append(1) or kernel(*a, **kw))
  model = random_model(get_preset("tiny", compute_dtype=dtype, attention_impl=impl), std=0.1)
  with emulated_kernels():
    got = generate(model, prompts, 6, temperature=0.0, max_slots=4)
  for g, w in zip(got, want, strict=True):
    assert g.tokens == w.tokens
    np.testing.assert_allclose(g.logprobs, w.logprobs, atol=atol)
  assert traced
