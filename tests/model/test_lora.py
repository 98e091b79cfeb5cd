"""LoRA adapters: zero B reproduces the base exactly; the update is x W + scale (x A) B."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import KVCache, Qwen3, get_preset
from spade_jax.model.lora import BASE, LoRAParam, adapted, base_fingerprint

CFG = get_preset("tiny", lora_rank=4, lora_alpha=8.0)


def _ids(shape, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(1, 1024, shape), jnp.int32)


def test_zero_adapters_reproduce_the_base_exactly_uncached_and_cached():
  base = Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0))
  model = Qwen3(CFG, rngs=nnx.Rngs(0))  # same seed: the same base weights, adapters after
  assert len(adapted(model)) == 7 * CFG.num_layers and base_fingerprint(model) == \
      base_fingerprint(base)
  ids = _ids((2, 9))
  np.testing.assert_array_equal(np.asarray(model(ids)), np.asarray(base(ids)))
  cache = KVCache.init(CFG, 2, 16)
  got, _ = model(ids, cache=cache)
  want, _ = base(ids, cache=cache)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_adapters_add_the_low_rank_update_to_the_kernel():
  model = Qwen3(CFG, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(1)
  state = nnx.state(model, LoRAParam)
  nnx.update(model, jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 0.1, x.shape),
                                                       x.dtype), state))
  ids = _ids((2, 9), seed=3)
  adapted_logits = np.asarray(model(ids))
  # Fold scale * A B into every kernel and drop the adapters: the same function.
  merged = Qwen3(get_preset("tiny"), rngs=nnx.Rngs(0))
  for (path, proj), (_, plain) in zip(adapted(model), _projections(merged, adapted(model)),
                                      strict=True):
    plain.kernel[...] = proj.kernel[...] + proj.lora.delta()
  np.testing.assert_allclose(np.asarray(merged(ids)), adapted_logits, atol=2e-5, rtol=1e-5)
  assert not np.allclose(adapted_logits, np.asarray(Qwen3(CFG, rngs=nnx.Rngs(0))(ids)),
                         atol=1e-3)
  assert base_fingerprint(model) == base_fingerprint(merged.__class__(CFG, rngs=nnx.Rngs(0)))
  assert len(jax.tree.leaves(nnx.state(model, BASE))) == len(jax.tree.leaves(
      nnx.state(merged, nnx.Param)))


def _projections(model, like):
  modules = dict(model.iter_modules())
  return [(path, modules[path]) for path, _ in like]


@pytest.mark.parametrize("changes, message", [
    (dict(lora_rank=-1), "lora_rank=-1 must be >= 0"),
    (dict(lora_rank=4, lora_alpha=0.0), "lora_alpha=0.0 > 0"),
    (dict(lora_rank=4, lora_targets=("qproj",)), r"lora_targets=\('qproj',\) match none"),
])
def test_bad_lora_settings_fail_with_the_field(changes, message):
  with pytest.raises(ValueError, match=message):
    get_preset("tiny", **changes)
