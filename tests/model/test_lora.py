"""LoRA adapters: zero B reproduces the base exactly; the update is x W + scale (x A) B."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import KVCache, Qwen3, get_preset
from spade_jax.model.lora import LoRAParam, adapted, base_fingerprint
from spade_jax.model.lora_io import merged

CFG = get_preset("tiny", lora_rank=4, lora_alpha=8.0)


@nnx.jit
def _forward(model, ids):
  return model(ids)


def _ids(shape, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(1, 1024, shape), jnp.int32)


def test_zero_adapters_reproduce_the_base_exactly_uncached_and_cached():
  base = Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0))
  model = Qwen3(CFG, rngs=nnx.Rngs(0))  # same seed: the same base weights, adapters after
  per_layer = sum(proj.lora.a.shape[0] for _, proj in adapted(model))  # stacked [L_g, ...]
  assert per_layer == 7 * CFG.num_layers and base_fingerprint(model) == \
      base_fingerprint(base)
  ids = _ids((2, 9))
  np.testing.assert_array_equal(np.asarray(_forward(model, ids)), np.asarray(_forward(base, ids)))
  cache = KVCache.init(CFG, 2, 16)
  # Op by op: compiled, XLA may fuse the (zero) update into the decode's matmul and round
  # the last bit differently; the training pass above is compiled and still exact.
  np.testing.assert_array_equal(np.asarray(model(ids, cache=cache)[0]),
                                np.asarray(base(ids, cache=cache)[0]))


def test_merged_adapters_give_the_adapted_function():
  model = Qwen3(CFG, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(1)
  nnx.update(model, jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.1, x.shape), x.dtype),
                                 nnx.state(model, LoRAParam)))
  ids = _ids((2, 9), seed=3)
  adapted_logits = np.asarray(_forward(model, ids))
  plain = merged(model)  # W + scale * A B, no adapters
  assert plain.cfg.lora_rank == 0 and not adapted(plain)
  np.testing.assert_allclose(np.asarray(_forward(plain, ids)), adapted_logits, atol=2e-5,
                             rtol=1e-5)
  base = np.asarray(_forward(Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0)), ids))
  assert np.abs(adapted_logits - base).max() > 1e-2
  assert base_fingerprint(model) != base_fingerprint(plain)  # other base weights


@pytest.mark.parametrize("changes, message", [
    (dict(lora_rank=-1), "lora_rank=-1 must be >= 0"),
    (dict(lora_rank=4, lora_alpha=0.0), "lora_alpha=0.0 > 0"),
    (dict(lora_rank=4, lora_targets=("qproj",)), r"lora_targets=\('qproj',\) match none"),
])
def test_bad_lora_settings_fail_with_the_field(changes, message):
  with pytest.raises(ValueError, match=message):
    get_preset("tiny", **changes)
