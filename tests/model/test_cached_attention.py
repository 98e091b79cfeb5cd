"""The blocked cached attention (multi-token appends on TPU) equals the reference attention.

Called directly on CPU with keys in the accelerator layout, and through the model with the
platform reported as "tpu". Tolerances are fixed (fp32).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.model import KVCache, attention, get_preset, make_mesh
from spade_jax.model.attention import blocked_cached_attention, dot_product_attention
from spade_jax.model.testing import random_model


def _append_inputs(starts, lengths, t: int, s: int, seed: int = 0):
  """Rows as the slot engine writes an append: row i holds starts[i] cached entries, then a
  chunk of T tokens whose first lengths[i] are real (the rest pads, position -1) over a window
  of S entries. Returns q [B, T, N, Hd], k, v [B, K, S, Hd], mask [B, T, S], real [B, T]."""
  rng = np.random.default_rng(seed)
  b = len(starts)
  q = jnp.asarray(rng.normal(size=(b, t, 4, 8)), jnp.float32)  # GQA: 4 query / 2 kv heads
  k, v = (jnp.asarray(rng.normal(size=(b, 2, s, 8)), jnp.float32) for _ in range(2))
  entry_pos = np.full((b, s), -1)
  query_pos = np.full((b, t), -1)
  for i, (start, length) in enumerate(zip(starts, lengths, strict=True)):
    entry_pos[i, :start + length] = np.arange(start + length)
    query_pos[i, :length] = start + np.arange(length)
  mask = (entry_pos[:, None, :] >= 0) & (entry_pos[:, None, :] <= query_pos[:, :, None])
  return q, k, v, jnp.asarray(mask), query_pos >= 0


def _reference(q, k, v, mask):
  return dot_product_attention(q, k.swapaxes(1, 2), v.swapaxes(1, 2), mask, 0.3)


# T = 21 in 8-query blocks (the last one padded); S = 48 in three 16-key steps, S = 40 padded
# to 48; and one block of each at the default sizes.
@pytest.mark.parametrize("t,s,query_block,key_block", [
    (21, 48, 8, 16), (21, 40, 8, 16), (21, 48, 512, 512)])
def test_blocked_attention_matches_the_reference(t, s, query_block, key_block):
  """Rows from entry 0, after 7 and 19 cached entries, with full, partial and one-token
  chunks: every real query's output equals the reference's."""
  q, k, v, mask, real = _append_inputs([0, 7, 19], [21, 13, 1], t, s)
  blocked = functools.partial(blocked_cached_attention, scale=0.3, query_block=query_block,
                              key_block=key_block)
  got = jax.jit(blocked)(q, k, v, mask)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(_reference(q, k, v, mask))[real],
                             atol=2e-5)


def test_blocked_attention_reads_no_key_block_past_what_its_queries_see(monkeypatch):
  """Two rows ending at keys 8 and 7 in a 64-key window (8 blocks of 8), queries in blocks of
  4: query blocks 0 and 1 see keys up to 7 (one key block each), block 2 up to 8 (two): four
  key steps, not 3 x 8, and the same outputs."""
  q, k, v, mask, real = _append_inputs([0, 5], [9, 3], 9, 64)
  steps = []
  step = attention._key_step  # pylint: disable=protected-access
  monkeypatch.setattr(attention, "_key_step", lambda *a: (
      jax.debug.callback(lambda: steps.append(1)), step(*a))[1])
  got = jax.jit(functools.partial(blocked_cached_attention, scale=0.3, query_block=4,
                                  key_block=8))(q, k, v, mask)
  jax.effects_barrier()
  assert len(steps) == 4
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(_reference(q, k, v, mask))[real],
                             atol=2e-5)


def test_blocked_attention_under_a_mesh_matches_unsharded():
  """Rows over data, kv heads over tensor: the compiler partitions the blocked form."""
  q, k, v, mask, real = _append_inputs([0, 7, 19, 3], [21, 13, 1, 5], 21, 48)
  fn = jax.jit(functools.partial(blocked_cached_attention, scale=0.3, query_block=8,
                                 key_block=16))
  want = fn(q, k, v, mask)
  mesh = make_mesh({"data": 2, "fsdp": 1, "tensor": 2, "expert": 1}, jax.devices()[:4])
  with jax.set_mesh(mesh):
    got = fn(q, k, v, mask)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-6)


def _prefill_then_append(model):
  """Hidden states of a 10-token prefill of three rows, then a 13-token append (6 and 13
  real tokens) onto rows 2 and 0, and the final cache positions."""
  ids = np.random.default_rng(2).integers(0, 1024, (5, 13)).astype(np.int32)
  cache = KVCache.init(model.cfg, 3, 48)
  h1, cache = model.hidden(jnp.asarray(ids[:3, :10]), cache=cache)
  valid = np.ones((2, 13), bool)
  valid[0, 6:] = False
  h2, cache = model.hidden(jnp.asarray(ids[3:]), attention_mask=jnp.asarray(valid),
                           cache=cache, rows=jnp.asarray([2, 0]), read_len=32)
  return np.asarray(h1), np.asarray(h2)[valid], np.asarray(cache.pos)


def test_the_model_appends_through_the_blocked_form_on_tpu(monkeypatch):
  """With the platform reported as "tpu" (keys in [B, K, S, Hd]) a prefill and an append onto
  two slots at different offsets run the blocked form, in several query blocks and key steps,
  and give the CPU path's hidden states."""
  model = random_model(get_preset("tiny", attention_impl="xla"), std=0.1)
  want = _prefill_then_append(model)
  calls = []
  blocked = functools.partial(blocked_cached_attention, query_block=4, key_block=8)
  monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
  monkeypatch.setattr(attention, "blocked_cached_attention",
                      lambda *a: calls.append(a[0].shape) or blocked(*a))
  got = _prefill_then_append(model)
  assert {shape[1] for shape in calls} == {10, 13}
  for g, w in zip(got, want, strict=True):
    np.testing.assert_allclose(g, w, atol=2e-5)
