"""Blocked causal attention (training pass) equals dot_product_attention, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.model import train_attention
from spade_jax.model.attention import dot_product_attention
from spade_jax.model.attention_impl import uncached_mask
from spade_jax.model.qwen3 import default_positions
from spade_jax.model.train_attention import causal_attention

B, T, N, K, HD = 3, 19, 4, 2, 8  # T not a multiple of the block: a short last block


def _inputs(segments: bool):
  rng = np.random.default_rng(0)
  q, k, v, dout = (jnp.asarray(rng.normal(size=(B, T, h, HD)), jnp.float32)
                   for h in (N, K, K, N))
  valid = np.ones((B, T), bool)
  valid[0, 13:] = False  # right padding
  valid[1, :4] = False  # left padding
  seg = None
  if segments:
    seg = jnp.asarray(np.repeat([[0] * 7 + [1] * 12], B, axis=0), jnp.int32)
  positions = default_positions(jnp.asarray(valid), seg)
  mask = uncached_mask(positions, seg)  # [B, T, T]
  return q, k, v, dout, mask, jnp.asarray(valid)


# max_blocks 4 with block 2: 19 rows would be 10 blocks, so the blocks grow to 6 rows.
@pytest.mark.parametrize("segments,block,max_blocks",
                         [(False, 8, None), (True, 5, None), (False, 64, None), (True, 2, 4)])
def test_causal_attention_matches_dot_product_attention(segments, block, max_blocks,
                                                        monkeypatch):
  if max_blocks:
    monkeypatch.setattr(train_attention, "MAX_BLOCKS", max_blocks)
  q, k, v, dout, mask, valid = _inputs(segments)
  scale = HD ** -0.5

  def loss(fn, q, k, v):
    out = fn(q, k, v, mask, scale)  # [B, T, N, HD]
    return jnp.sum(jnp.where(valid[:, :, None, None], out * dout, 0.0)), out

  ours = jax.value_and_grad(lambda *a: loss(
      lambda *b: causal_attention(*b, block=block), *a), argnums=(0, 1, 2), has_aux=True)
  ref = jax.value_and_grad(lambda *a: loss(dot_product_attention, *a), argnums=(0, 1, 2),
                           has_aux=True)
  (_, out), grads = jax.jit(ours)(q, k, v)
  (_, want), want_grads = ref(q, k, v)
  rows = np.asarray(valid)  # padding queries' outputs are unused (and differ)
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want)[rows], atol=1e-5)
  for name, got, exp in zip("qkv", grads, want_grads, strict=True):
    np.testing.assert_allclose(got, exp, atol=2e-5, err_msg=f"d{name}")


def test_causal_attention_rejects_cross_attention_shapes():
  q, k, v, _, mask, _ = _inputs(False)
  with pytest.raises(ValueError, match="self-attention shapes"):
    causal_attention(q, k[:, :-1], v[:, :-1], mask[:, :, :-1], 1.0)
