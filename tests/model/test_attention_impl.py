"""Every uncached attention kernel equals the reference attention, values and gradients.

The accelerator kernels run here through `emulated_kernels()`: the cuDNN path as the XLA
implementation of the same `jax.nn.dot_product_attention` call, splash in Pallas interpret
mode. Tolerances are fixed (fp32).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model import attention_impl, get_preset, make_mesh
from spade_jax.model.attention import dot_product_attention
from spade_jax.model.attention_impl import (
  decode_attention,
  emulated_kernels,
  resolve_attention_impl,
  self_attention,
  self_mask,
  uncached_mask,
)
from spade_jax.model.qwen3 import default_positions
from spade_jax.model.testing import random_model

FUSED = ("xla", "cudnn", "pallas_tpu")


def _inputs(b, t, n, k, hd, segments: bool, seed=0):
  rng = np.random.default_rng(seed)
  q, kk, v, dout = (jnp.asarray(rng.normal(size=(b, t, h, hd)), jnp.float32)
                    for h in (n, k, k, n))
  valid = np.ones((b, t), bool)
  valid[0, t - 6:] = False  # right padding
  valid[1, :4] = False  # left padding
  seg = None
  if segments:
    seg = jnp.asarray(np.repeat([[0] * (t // 3) + [1] * (t - t // 3)], b, axis=0), jnp.int32)
  positions = default_positions(jnp.asarray(valid), seg)
  return q, kk, v, dout, positions, seg, valid


def _loss_and_grads(fn, q, k, v, dout, valid):
  """Loss over the real queries only (a pad query's output is never used)."""
  def loss(q, k, v):
    out = fn(q, k, v)
    return jnp.sum(jnp.where(valid[:, :, None, None], out * dout, 0.0)), out
  (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
  return out, grads


# T = 19: one short query; T = 300: splash pads to 384 tokens and runs three 128-blocks.
@pytest.mark.parametrize("impl", FUSED)
@pytest.mark.parametrize("t,segments", [(19, False), (19, True), (300, True)])
def test_kernel_matches_reference(impl, t, segments):
  if t == 300 and impl != "pallas_tpu":
    pytest.skip("the long case exercises splash's padding and tiling")
  q, k, v, dout, positions, seg, valid = _inputs(2, t, 4, 2, 8, segments)  # GQA: 4 / 2 heads
  scale = 8 ** -0.5
  with emulated_kernels():
    mask = self_mask(impl, positions, seg)
    got, got_grads = jax.jit(lambda *a: _loss_and_grads(
        lambda q, k, v: self_attention(impl, q, k, v, mask, scale), *a, dout, valid))(q, k, v)
  dense = uncached_mask(positions, seg)
  want, want_grads = _loss_and_grads(
      lambda q, k, v: dot_product_attention(q, k, v, dense, scale), q, k, v, dout, valid)
  np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid], atol=2e-5)
  for name, g, w in zip("qkv", got_grads, want_grads, strict=True):
    np.testing.assert_allclose(g, w, atol=5e-5, err_msg=f"d{name}")


def _model_logits_and_grads(cfg, ids, valid, seg):
  """Logits and the gradient of the mean next-token log-prob over real tokens."""
  model = random_model(cfg, seed=0, std=0.1)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(params):
    logits = nnx.merge(graphdef, params, rest)(ids, attention_mask=valid, segment_ids=seg)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), ids[:, 1:, None], -1)[..., 0]
    return jnp.mean(jnp.where(valid[:, 1:] & valid[:, :-1], logp, 0.0)), logits  # real -> real

  (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  return logits, grads


_IDS = np.random.default_rng(1).integers(0, 1024, (2, 24)).astype(np.int32)
_VALID = np.ones((2, 24), bool)
_VALID[0, 18:] = False  # right padding
_VALID[1, :3] = False  # left padding
_SEG = np.array([[0] * 10 + [1] * 14, [0] * 24], np.int32)  # row 0 packs two segments


@functools.cache
def _blocked_reference(preset, packed):
  seg = jnp.asarray(_SEG) if packed else None
  return _model_logits_and_grads(get_preset(preset, attention_impl="blocked"),
                                 jnp.asarray(_IDS), jnp.asarray(_VALID), seg)


# "xla" is the call "cudnn" makes here (emulated), so the model runs once per distinct path:
# cuDNN with packed segments (a mask) and without (padding as lengths), splash with both.
@pytest.mark.parametrize("preset,impl,packed", [
    ("tiny", "cudnn", True), ("tiny", "cudnn", False), ("tiny", "pallas_tpu", True),
    ("tiny-moe", "cudnn", True),
    pytest.param("tiny-moe", "pallas_tpu", False, marks=pytest.mark.slow)])  # MoE: cudnn's case
def test_model_matches_blocked_kernel(preset, impl, packed):
  """The whole model (dense and MoE presets) with left and right padding."""
  ids, valid = jnp.asarray(_IDS), _VALID
  seg = jnp.asarray(_SEG) if packed else None
  want, want_grads = _blocked_reference(preset, packed)
  with emulated_kernels():
    got, got_grads = _model_logits_and_grads(
        get_preset(preset, attention_impl=impl), ids, jnp.asarray(valid), seg)
  np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid], atol=2e-5)
  for path, g in jax.tree_util.tree_leaves_with_path(got_grads):
    w = dict(jax.tree_util.tree_leaves_with_path(want_grads))[path]
    np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4, err_msg=jax.tree_util.keystr(path))


def test_splash_under_a_mesh_matches_unsharded():
  """Under a mesh the Pallas call runs per shard (rows over data, kv heads over tensor)."""
  q, k, v, _, positions, seg, valid = _inputs(4, 40, 4, 2, 8, True)
  mesh = make_mesh({"data": 2, "fsdp": 1, "tensor": 2, "expert": 1}, jax.devices()[:4])
  with emulated_kernels():
    mask = self_mask("pallas_tpu", positions, seg)
    fn = jax.jit(lambda q, k, v, m: self_attention("pallas_tpu", q, k, v, m, 0.3))
    want = fn(q, k, v, mask)
    with jax.set_mesh(mesh):
      got = fn(q, k, v, mask)
  np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(want)[valid], atol=1e-6)


@pytest.mark.parametrize("platform,dtype,expected", [
    ("cpu", "float32", "blocked"), ("cpu", "bfloat16", "blocked"),
    ("gpu", "bfloat16", "cudnn"), ("gpu", "float16", "cudnn"), ("gpu", "float32", "xla"),
    ("tpu", "bfloat16", "pallas_tpu"), ("tpu", "float32", "pallas_tpu")])
def test_auto_picks_the_platform_kernel(platform, dtype, expected):
  assert resolve_attention_impl("auto", dtype, platform) == expected


@pytest.mark.parametrize("name,platform,dtype,needs", [
    ("cudnn", "cpu", "bfloat16", "needs a gpu"), ("pallas_tpu", "gpu", "bfloat16", "needs a tpu"),
    ("pallas_tpu", "cpu", "float32", "needs a tpu"), ("cudnn", "gpu", "float32", "compute_dtype"),
    ("flash", "gpu", "bfloat16", "expected one of")])
def test_a_kernel_the_platform_lacks_fails_naming_the_option(name, platform, dtype, needs):
  with pytest.raises(ValueError, match=r"config\.model\.attention_impl") as err:
    resolve_attention_impl(name, dtype, platform)
  assert needs in str(err.value)


def test_the_model_refuses_a_kernel_the_platform_lacks():
  model = random_model(get_preset("tiny", attention_impl="cudnn"))
  with pytest.raises(ValueError, match=r"attention_impl='cudnn' needs a gpu"):
    model(jnp.zeros((1, 4), jnp.int32))


def test_config_rejects_an_unknown_kernel():
  with pytest.raises(ValueError, match="ModelConfig.attention_impl='flash'"):
    get_preset("tiny", attention_impl="flash")


_DECODE_ENTRIES = 192  # TPU kernel: three 64-entry pages, one page a compute block


def _decode_inputs(rows: str, dtype=jnp.float32):
  """One query per row over a 192-entry window. Rows (one letter each): "p" a 37-entry prefix,
  "l" a 150-entry prefix (three pages), "a" all entries, "n" none (an idle slot), "o" a run
  starting at 5, "h" a prefix with a hole at entry 20."""
  rng = np.random.default_rng(3)
  b, s = len(rows), _DECODE_ENTRIES
  q = jnp.asarray(rng.normal(size=(b, 1, 4, 8)), dtype)  # the model casts k, v to q's dtype
  k, v = (jnp.asarray(rng.normal(size=(b, 2, s, 8)), dtype) for _ in range(2))
  idx = np.arange(s)
  runs = {"p": idx < 37, "l": idx < 150, "a": idx < s, "n": idx < 0,
          "o": (idx >= 5) & (idx < 50), "h": (idx < 37) & (idx != 20)}
  return q, k, v, jnp.asarray(np.stack([runs[r] for r in rows])[:, None, :])


def _decode(impl, q, k, v, mask, fallback):
  with emulated_kernels():
    return jax.jit(lambda *a: decode_attention(impl, *a, 0.3, fallback=fallback))(q, k, v, mask)


_MARKER = lambda q, *_: jnp.full(q.shape, 7.0, q.dtype)  # a fallback that marks its output


# The GPU kernel reads any run; the TPU kernel runs from entry 0 and reads bf16 caches.
@pytest.mark.parametrize("impl,rows,dtype", [
    ("cudnn", "plano", jnp.float32), ("pallas_tpu", "plan", jnp.bfloat16)])
def test_decode_kernel_reads_the_visible_run(impl, rows, dtype, monkeypatch):
  """Consecutive visible entries: the Pallas decode kernel equals the reference (in fp32 on
  the same cached values); an idle row comes out finite (it is never used)."""
  monkeypatch.setattr(attention_impl, "key_entry_axis", lambda platform=None: 2)
  q, k, v, mask = _decode_inputs(rows, dtype)
  got = _decode(impl, q, k, v, mask, _MARKER)
  f32 = lambda x: x.astype(jnp.float32).swapaxes(1, 2)
  want = dot_product_attention(q.astype(jnp.float32), f32(k), f32(v), mask, 0.3)
  live = [i for i, r in enumerate(rows) if r != "n"]
  np.testing.assert_allclose(np.asarray(got, np.float32)[live], np.asarray(want)[live],
                             atol=1e-5 if dtype == jnp.float32 else 8e-3)
  assert np.isfinite(np.asarray(got, np.float32)).all()


@pytest.mark.parametrize("impl,rows,dtype", [
    ("cudnn", "ph", jnp.float32), ("pallas_tpu", "ph", jnp.bfloat16),
    ("pallas_tpu", "po", jnp.bfloat16), ("pallas_tpu", "pa", jnp.float32)])
def test_decode_kernel_falls_back_where_it_cannot_read_the_rows(impl, rows, dtype,
                                                                monkeypatch):
  """A row with a hole (either kernel), a run not from entry 0 or an fp32 cache (the TPU
  kernel) sends the whole step to the fallback, the einsum, marked here by 7s."""
  monkeypatch.setattr(attention_impl, "key_entry_axis", lambda platform=None: 2)
  np.testing.assert_array_equal(_decode(impl, *_decode_inputs(rows, dtype), _MARKER), 7.0)


@pytest.mark.parametrize("impl,dtype", [("cudnn", jnp.float32), ("pallas_tpu", jnp.bfloat16)])
def test_decode_kernel_under_a_mesh_matches_unsharded(impl, dtype, monkeypatch):
  """Under a 2 x 2 mesh the decode kernel runs per shard (rows over data, kv heads over
  tensor), not through the fallback, and equals the unsharded call."""
  monkeypatch.setattr(attention_impl, "key_entry_axis", lambda platform=None: 2)
  q, k, v, mask = _decode_inputs("plan", dtype)
  mesh = make_mesh({"data": 2, "fsdp": 1, "tensor": 2, "expert": 1}, jax.devices()[:4])
  want = _decode(impl, q, k, v, mask, _MARKER)
  with jax.set_mesh(mesh):
    got = _decode(impl, q, k, v, mask, _MARKER)
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=1e-6)
  assert not np.any(np.asarray(got, np.float32) == 7.0)
