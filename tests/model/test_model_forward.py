"""Qwen3 forward conventions: KV cache == uncached, padding and packing == separate rows.

The "tiny-moe" preset has a dense layer (0), a sparse layer (1) and an untied head, so one
model covers both MLP kinds. All uncached calls share one jitted shape [4, 12] to keep
compiles few; a row's reference logits come from the row alone at the start of a batch row
(later tokens cannot change earlier ones under the causal mask).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import KVCache, get_preset
from spade_jax.model.testing import random_model

ATOL = 1e-5  # fp32, logits of order 1
B, T = 4, 12


@pytest.fixture(scope="module")
def setup():
  cfg = get_preset("tiny-moe")
  graphdef, state = nnx.split(random_model(cfg))

  @jax.jit
  def forward(ids, mask, seg):
    return nnx.merge(graphdef, state)(ids, attention_mask=mask, segment_ids=seg)

  @jax.jit
  def cached(ids, positions, mask, cache):
    return nnx.merge(graphdef, state)(ids, positions, attention_mask=mask, cache=cache)

  rows = [np.random.RandomState(i).randint(1, cfg.vocab_size, T).astype(np.int32)
          for i in range(B)]
  ones = np.ones((B, T), np.int32)
  reference = np.asarray(forward(np.stack(rows), ones, ones))  # [B, T, V]
  return cfg, forward, cached, rows, reference


def test_cache_prefill_decode_append_equals_uncached(setup):
  cfg, _, cached, rows, reference = setup
  lengths = [4, 2, 3, 4]  # prompt lengths; shorter prompts are left-padded to 4
  prompt = np.zeros((B, 4), np.int32)
  mask = np.zeros((B, 4), np.int32)
  for r, n in enumerate(lengths):
    prompt[r, 4 - n:], mask[r, 4 - n:] = rows[r][:n], 1
  cache = KVCache.init(cfg, B, 16)
  logits, cache = cached(prompt, None, mask, cache)  # prefill, positions derived from mask
  got = [[logits[r, 4 - n:]] for r, n in enumerate(lengths)]
  for step in range(2):  # decode with explicit positions
    pos = np.array(lengths)[:, None] + step
    tok = np.take_along_axis(np.stack(rows), pos, axis=1)
    logits, cache = cached(tok, pos.astype(np.int32), np.ones((B, 1), np.int32), cache)
    for r in range(B):
      got[r].append(logits[r])
  pos = np.array(lengths)[:, None] + 2 + np.arange(4)  # a new turn of 4 tokens
  logits, cache = cached(np.take_along_axis(np.stack(rows), pos, axis=1), None,
                         np.ones((B, 4), np.int32), cache)
  for r, n in enumerate(lengths):
    np.testing.assert_allclose(np.concatenate(got[r] + [logits[r]]), reference[r, :n + 6],
                               atol=ATOL)
  np.testing.assert_array_equal(cache.end, [10] * B)
  np.testing.assert_array_equal(cache.pos[1], [-1, -1] + list(range(8)) + [-1] * 6)


def test_left_and_right_padding_equal_unpadded_rows(setup):
  _, forward, _, rows, reference = setup
  ids = np.zeros((B, T), np.int32)
  mask = np.zeros((B, T), np.int32)
  ids[0, 5:], mask[0, 5:] = rows[0][:7], 1  # left padding
  ids[1, :9], mask[1, :9] = rows[1][:9], 1  # right padding
  ids[2], mask[2] = rows[2], 1
  logits = np.asarray(forward(ids, mask, np.ones((B, T), np.int32)))
  np.testing.assert_allclose(logits[0, 5:], reference[0, :7], atol=ATOL)
  np.testing.assert_allclose(logits[1, :9], reference[1, :9], atol=ATOL)
  np.testing.assert_allclose(logits[2], reference[2], atol=ATOL)


def test_packed_segments_equal_separate_rows(setup):
  _, forward, _, rows, reference = setup
  ids = np.zeros((B, T), np.int32)
  seg = np.zeros((B, T), np.int32)
  ids[0, :5], ids[0, 5:11] = rows[0][:5], rows[1][:6]
  seg[0, :5], seg[0, 5:11] = 1, 2  # last token is padding (segment 0, mask 0)
  ids[1, :4], ids[1, 4:8], ids[1, 8:] = rows[2][:4], rows[3][:4], rows[0][:4]
  seg[1, :4], seg[1, 4:8], seg[1, 8:] = 3, 4, 5
  logits = np.asarray(forward(ids, (seg > 0).astype(np.int32), seg))
  np.testing.assert_allclose(logits[0, :5], reference[0, :5], atol=ATOL)
  np.testing.assert_allclose(logits[0, 5:11], reference[1, :6], atol=ATOL)
  np.testing.assert_allclose(logits[1, :4], reference[2, :4], atol=ATOL)
  np.testing.assert_allclose(logits[1, 4:8], reference[3, :4], atol=ATOL)
  np.testing.assert_allclose(logits[1, 8:], reference[0, :4], atol=ATOL)


def test_tied_bf16_compute_hidden_logits_and_dtypes():
  cfg = get_preset("tiny", compute_dtype="bfloat16")
  graphdef, state = nnx.split(random_model(cfg))
  ref_graphdef, ref_state = nnx.split(random_model(cfg.replace(compute_dtype="float32")))
  ids = np.arange(12, dtype=np.int32).reshape(2, 6)

  @jax.jit
  def run(ids):
    model = nnx.merge(graphdef, state)
    h = model.hidden(ids)
    return h, model(ids), model.logits_from_hidden(h), nnx.merge(ref_graphdef, ref_state)(ids)

  h, logits, from_hidden, ref = run(ids)
  assert h.shape == (2, 6, cfg.hidden_size) and h.dtype == jnp.bfloat16
  assert logits.dtype == jnp.float32 and state["embed"]["embedding"][...].dtype == jnp.float32
  np.testing.assert_array_equal(from_hidden, logits)
  # bf16 compute tracks the fp32 model with the same parameters to bf16 accuracy.
  np.testing.assert_allclose(logits, ref, atol=0.05)


def test_remat_wraps_each_layer_only_when_asked():
  ids = np.arange(16, dtype=np.int32).reshape(2, 8)
  # One remat: the body of the one scan over tiny's two layers.
  for remat, count in (("none", 0), ("full", 1), ("dots", 1), ("auto", 0)):  # auto on CPU
    model = random_model(get_preset("tiny", remat=remat))
    loss = lambda s, m=model: jnp.mean(jnp.square(nnx.merge(nnx.graphdef(m), s)(ids)))
    assert str(jax.make_jaxpr(jax.grad(loss))(nnx.state(model))).count("remat2[") == count
