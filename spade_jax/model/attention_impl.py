"""The one switch that picks the uncached (training, scoring) attention kernel per platform.

`ModelConfig.attention_impl` (`config.model.attention_impl`) names it:
- "blocked": `train_attention.causal_attention`, the query-blocked XLA form tuned for CPU;
- "xla": `jax.nn.dot_product_attention(implementation="xla")`, the full square on any platform;
- "cudnn": the same call with `implementation="cudnn"` (cuDNN flash attention; bf16 / fp16);
- "pallas_tpu": JAX's Pallas splash attention kernel for TPU
  (`jax.experimental.pallas.ops.tpu.splash_attention`), one MQA kernel per kv head;
- "auto": "blocked" on CPU, "cudnn" on GPU with bf16 / fp16 compute ("xla" with fp32), and
  "pallas_tpu" on TPU.
Naming a kernel the platform lacks raises a ValueError that names the option.

The blocked kernel reads the dense [B, T, T] mask of `uncached_mask`. The fused kernels read
one value per token (`self_mask`): without packing, whether it is real ([B, T] bool); with
`segment_ids`, its segment or `PAD_SEGMENT` on padding ([B, T] int32); plus causality by
index. That is the same visibility for every real token (a pad's output is never used).
Splash takes segment ids natively. The `jax.nn.dot_product_attention` call takes padding
as sequence lengths: each row's real tokens are moved to its front in order (a stable
argsort), attended with `is_causal` and `query_seq_lengths = key_value_seq_lengths`, and
moved back, so any padding costs no mask; packed rows instead pass the segment equality as
its `mask` (jax adds it as a [B, 1, T, T] bias).

A one-token decode step over the KV cache runs a Pallas decode kernel that reads each row's
visible entries only, whenever every row's visible entries are one run of consecutive
entries (the slot engine keeps rows so): with "cudnn" JAX's GPU decode kernel
(`jax.experimental.pallas.ops.gpu.decode_attention.gqa`, any run), with "pallas_tpu" JAX's
TPU paged-attention kernel (`jax.experimental.pallas.ops.tpu.paged_attention`, runs from entry
0, bf16 caches: it reads keys and values as bf16) over the row-major cache viewed as pages.
Otherwise, and on every other path, the cached
attention is the batched einsum over the whole window (`decode_attention`).

`emulated_kernels()` lets tests run the accelerator kernels on CPU: the cuDNN call through
`implementation="xla"` (the same call, the XLA implementation) and the Pallas kernels in
interpret mode.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp
import numpy as np

from spade_jax.model.config import ATTENTION_IMPLS
from spade_jax.model.kv_cache import key_entry_axis
from spade_jax.model.platform import cores_per_chip, current_platform
from spade_jax.model.sharding import logical_to_spec
from spade_jax.model.train_attention import causal_attention

_PLATFORM_IMPLS = {"cpu": ("blocked", "xla"), "gpu": ("blocked", "xla", "cudnn"),
                   "tpu": ("blocked", "xla", "pallas_tpu")}
_NEEDS = {"cudnn": "gpu", "pallas_tpu": "tpu"}
_HALF = ("bfloat16", "float16")
PAD_SEGMENT = int(np.iinfo(np.int32).min)  # segment id of padding tokens (fused kernels)
_SPLASH_BLOCKS = (512, 256, 128)  # splash tile sizes tried, largest first (T is padded to 128)
_PAGE_SIZES = (64, 32, 16)  # pages the TPU decode kernel views the cache as, largest first
_PAGED_BLOCK = 512  # at most this many entries per compute block of the TPU decode kernel

_EMULATE = contextvars.ContextVar("spade_jax_emulated_kernels", default=False)


@contextlib.contextmanager
def emulated_kernels():
  """Within this block (at trace time) "cudnn" and "pallas_tpu" run on any platform: cuDNN
  as the XLA implementation of the same call, the Pallas kernels (splash, GPU decode, TPU
  paged decode) in interpret mode. For tests."""
  token = _EMULATE.set(True)
  try:
    yield
  finally:
    _EMULATE.reset(token)


def resolve_attention_impl(name: str, compute_dtype: str, platform: str | None = None) -> str:
  """The kernel `name` means on `platform` (default: `platform.current_platform()`); raises a
  ValueError naming config.model.attention_impl if the platform lacks it."""
  platform = current_platform() if platform is None else platform
  if name not in ATTENTION_IMPLS:
    raise ValueError(f"config.model.attention_impl={name!r}; expected one of {ATTENTION_IMPLS}")
  half = str(jnp.dtype(compute_dtype)) in _HALF
  if name == "auto":
    return {"gpu": "cudnn" if half else "xla", "tpu": "pallas_tpu"}.get(platform, "blocked")
  if _EMULATE.get():
    return name
  available = _PLATFORM_IMPLS.get(platform, ("blocked", "xla"))
  if name not in available:
    raise ValueError(f"config.model.attention_impl={name!r} needs a {_NEEDS[name]}; this "
                     f"process runs on {platform!r}, which offers {available} (or 'auto')")
  if name == "cudnn" and not half:
    raise ValueError(f"config.model.attention_impl='cudnn' needs model.compute_dtype in {_HALF} "
                     f"(cuDNN flash attention), got {compute_dtype!r}; use 'xla' or 'auto'")
  return name


def uncached_mask(positions: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
  """[B, T, T] visibility: causal, real keys (position >= 0), same segment when packed."""
  t = positions.shape[1]
  mask = jnp.tril(jnp.ones((t, t), bool))[None] & (positions >= 0)[:, None, :]
  if segment_ids is not None:
    mask &= segment_ids[:, :, None] == segment_ids[:, None, :]
  return mask


def kernel_segments(positions: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
  """[B, T] int32 segment id of each token for the fused kernels; PAD_SEGMENT on pads."""
  seg = jnp.zeros_like(positions) if segment_ids is None else segment_ids
  return jnp.where(positions >= 0, seg, PAD_SEGMENT).astype(jnp.int32)


def self_mask(impl: str, positions: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
  """What `self_attention(impl, ...)` reads as its mask: [B, T, T] bool for "blocked"; for
  the fused kernels [B, T] bool (real tokens) without packing, [B, T] int32 segment ids
  (`kernel_segments`) with it. No [B, T, T] array is built for the fused kernels."""
  if impl == "blocked":
    return uncached_mask(positions, segment_ids)
  if segment_ids is None:
    return positions >= 0
  return kernel_segments(positions, segment_ids)


def self_attention(impl: str, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                   scale: float) -> jax.Array:
  """Causal self-attention: q [B, T, N, Hd]; k, v [B, T, K, Hd]; mask from `self_mask`.

  `impl` is a resolved name (not "auto"). Returns [B, T, N, Hd] in v's dtype.
  """
  if impl == "blocked":
    return causal_attention(q, k, v, mask, scale)
  if impl in ("xla", "cudnn"):
    return _dot_product(q, k, v, mask, scale, impl)
  if impl == "pallas_tpu":
    segments = jnp.where(mask, 0, PAD_SEGMENT) if mask.dtype == jnp.bool_ else mask
    return _sharded_over_rows(functools.partial(_splash, scale=scale),
                              ("b.h.", "b.h.", "b.h.", "b."), "b.h.", q, k, v, segments)
  raise ValueError(f"attention kernel {impl!r} is not resolved; expected one of "
                   f"{ATTENTION_IMPLS[1:]}")


def decode_attention(impl: str, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                     scale: float, *, fallback) -> jax.Array:
  """Attention over a KV-cache window: q [B, T, N, Hd]; k, v [B, K, S, Hd] (k [B, K, Hd, S]
  on CPU); mask [B, T, S]. `fallback(q, k, v, mask, scale)` is the einsum form.

  For "cudnn" and "pallas_tpu", T == 1, S a multiple of 16 and keys in the accelerator
  layout, the platform's Pallas decode kernel reads each row's visible run only, when every
  row's visible entries are consecutive (and, for the TPU kernel, start at entry 0): checked
  on device, else the fallback. The TPU kernel casts the keys and values it loads to bf16,
  so it runs on bf16 caches only. Under a mesh the kernel runs per shard.
  """
  kernel = _DECODE_KERNELS.get(impl)
  t, s = q.shape[1], v.shape[2]
  if (kernel is None or t != 1 or s % 16 or key_entry_axis() != 2
      or (impl == "pallas_tpu" and v.dtype != jnp.bfloat16)):
    return fallback(q, k, v, mask, scale)
  visible = mask[:, 0, :]  # [B, S]
  first = jnp.argmax(visible, axis=1).astype(jnp.int32)  # 0 when nothing is visible
  last = s - 1 - jnp.argmax(visible[:, ::-1], axis=1).astype(jnp.int32)
  count = jnp.sum(visible, axis=1, dtype=jnp.int32)
  runs = (count == 0) | (last - first + 1 == count)  # [B]
  if impl == "pallas_tpu":  # the paged kernel reads entries [0, length)
    runs &= (count == 0) | (first == 0)
  run = functools.partial(_sharded_over_rows, functools.partial(kernel, scale=scale),
                          ("b.h.", "bh..", "bh..", "b", "b"), "b.h.")
  return jax.lax.cond(jnp.all(runs), lambda: run(q, k, v, first, first + count),
                      lambda: fallback(q, k, v, mask, scale))


def _gpu_decode(q, k, v, start, end, *, scale):
  """The Pallas GPU decode kernel over entries [start, end) of each row: q [B, 1, N, Hd];
  k, v [B, K, S, Hd] -> [B, 1, N, Hd]."""
  from jax.experimental.pallas.ops.gpu import (  # pylint: disable=import-outside-toplevel
    decode_attention as pallas_decode,
  )
  s = v.shape[2]
  splits = next(n for n in (16, 8, 4, 2, 1) if s % (16 * n) == 0)  # >= 16 entries a split
  block = next(n for n in (128, 64, 32, 16) if (s // splits) % n == 0)
  out = pallas_decode.gqa(q[:, 0], k.swapaxes(1, 2), v.swapaxes(1, 2), start, end,
                          sm_scale=scale, block_k=block, k_splits=splits,
                          interpret=_EMULATE.get())  # [B, N, Hd]
  return out[:, None].astype(v.dtype)


def _tpu_decode(q, k, v, start, end, *, scale):
  """JAX's Pallas TPU paged-attention kernel over entries [0, end) of each row (`start` is 0:
  decode_attention checks it): q [B, 1, N, Hd]; k, v [B, K, S, Hd] -> [B, 1, N, Hd].

  The cache is not paged, but each (row, kv head) block of S entries is contiguous, so the
  buffers are viewed (a free reshape) as one kv head's paged cache of B * K sequences with an
  identity page table; each sequence is one (row, kv head) with its G query heads. On a chip
  with two TensorCores (v4, v5p) the sequences are split between them (`megacore_mode`);
  otherwise the kernel runs on one and the other idles.
  """
  from jax.experimental.pallas import tpu as pltpu  # pylint: disable=import-outside-toplevel
  from jax.experimental.pallas.ops.tpu.paged_attention import (  # pylint: disable=import-outside-toplevel
    paged_attention,
  )
  del start
  b, _, n, hd = q.shape
  kv_heads, s = k.shape[1], k.shape[2]
  page = next(size for size in _PAGE_SIZES if s % size == 0)
  pages = s // page
  per_block = next(c for c in (8, 4, 2, 1) if pages % c == 0 and c * page <= _PAGED_BLOCK)
  seqs = b * kv_heads
  paged = lambda x: x.reshape(1, seqs * pages, page, hd)  # [1, B*K*S/page, page, Hd]
  table = (jnp.arange(seqs, dtype=jnp.int32)[:, None] * pages
           + jnp.arange(pages, dtype=jnp.int32)[None, :])  # [B*K, S/page]
  queries = (q[:, 0].astype(jnp.float32) * scale).reshape(seqs, n // kv_heads, hd)  # [B*K, G, Hd]
  interpret = pltpu.force_tpu_interpret_mode() if _EMULATE.get() else contextlib.nullcontext()
  with interpret:
    out = paged_attention(queries, paged(k), paged(v), jnp.repeat(end, kv_heads), table,
                          pages_per_compute_block=per_block,
                          megacore_mode=_megacore_mode(seqs))  # [B*K, G, Hd]
  return out.reshape(b, 1, n, hd).astype(v.dtype)


def _megacore_mode(sequences: int) -> str | None:
  """The paged kernel's split over a chip's two TensorCores: by sequence where there are two
  cores and an even number of sequences (the kernel's requirement), else none."""
  return "batch" if cores_per_chip() == 2 and sequences % 2 == 0 else None


_DECODE_KERNELS = {"cudnn": _gpu_decode, "pallas_tpu": _tpu_decode}


def _dot_product(q, k, v, mask, scale, impl):
  """jax.nn.dot_product_attention: padding as lengths (unpacked rows), else a segment mask."""
  implementation = "xla" if impl == "cudnn" and _EMULATE.get() else impl
  if mask.dtype != jnp.bool_:  # packed segment ids
    visible = mask[:, None, :, None] == mask[:, None, None, :]  # [B, 1, T, T]
    return jax.nn.dot_product_attention(q, k, v, mask=visible, scale=scale, is_causal=True,
                                        implementation=implementation)
  order = jnp.argsort(~mask, axis=1, stable=True)  # [B, T]: real tokens first, in order
  lengths = jnp.sum(mask, axis=1, dtype=jnp.int32)
  gather = lambda x, index: jnp.take_along_axis(x, index[:, :, None, None], axis=1)
  out = jax.nn.dot_product_attention(
      gather(q, order), gather(k, order), gather(v, order), scale=scale, is_causal=True,
      query_seq_lengths=lengths, key_value_seq_lengths=lengths, implementation=implementation)
  return gather(out, jnp.argsort(order, axis=1))  # back to the rows' own order


def _sharded_over_rows(fn, layouts: tuple[str, ...], out_layout: str, *args):
  """fn(*args) per device shard under an active mesh, else once. Each layout string names an
  array's axes: "b" rows, "h" kv heads or query heads grouped by kv head, both split as the
  KV cache's (kv_cache.map_with_axes), "." whole; args[1] holds the kv heads. A Pallas call is not
  partitioned by the compiler, so it runs inside shard_map."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return fn(*args)
  rows, kv_heads = args[0].shape[0], args[1].shape[layouts[1].index("h")]
  b, h = logical_to_spec(("slots", "kv_heads"), (rows, kv_heads), mesh)  # as the KV cache
  axes = {"b": b, "h": h}
  spec = lambda layout: jax.sharding.PartitionSpec(*(axes.get(c) for c in layout))
  return jax.shard_map(fn, in_specs=tuple(spec(layout) for layout in layouts),
                       out_specs=spec(out_layout), check_vma=False)(*args)


def _splash(q, k, v, segments, *, scale):
  """Splash attention per (row, kv head): q [B, T, N, Hd]; k, v [B, T, K, Hd]."""
  # Imported here: the TPU kernels are an optional part of jax (absent from some builds).
  from jax.experimental.pallas.ops.tpu.splash_attention import (  # pylint: disable=import-outside-toplevel
    splash_attention_kernel as splash,
  )
  b, t, n, hd = q.shape
  kv_heads = k.shape[2]
  padded = -(-t // 128) * 128  # splash tiles are multiples of 128 tokens
  pad = lambda x, fill=0: jnp.pad(x, ((0, 0), (0, padded - t)) + ((0, 0),) * (x.ndim - 2),
                                  constant_values=fill)
  qh = pad(q * scale).reshape(b, padded, kv_heads, n // kv_heads, hd).transpose(0, 2, 3, 1, 4)
  kh = pad(k).transpose(0, 2, 1, 3)  # [B, K, T', Hd]
  vh = pad(v).transpose(0, 2, 1, 3)
  seg = pad(segments, PAD_SEGMENT)  # [B, T']
  kernel = _splash_kernel(padded, n // kv_heads, _EMULATE.get())

  def one_row(qr, kr, vr, sr):  # [K, G, T', Hd], [K, T', Hd], [K, T', Hd], [T']
    ids = splash.SegmentIds(q=sr, kv=sr)
    return jax.vmap(lambda qk, kk, vk: kernel(qk, kk, vk, segment_ids=ids))(qr, kr, vr)

  out = jax.vmap(one_row)(qh, kh, vh, seg)  # [B, K, G, T', Hd]
  return out.transpose(0, 3, 1, 2, 4).reshape(b, padded, n, hd)[:, :t].astype(v.dtype)


def _splash_kernel(length: int, group: int, interpret: bool):
  """The causal MQA splash kernel for `group` query heads over `length` (multiple of 128).

  Built at each trace, not cached: its block tables become arrays of the trace that builds
  it."""
  from jax.experimental.pallas.ops.tpu.splash_attention import (  # pylint: disable=import-outside-toplevel
    splash_attention_kernel as splash,
  )
  from jax.experimental.pallas.ops.tpu.splash_attention import (  # pylint: disable=import-outside-toplevel
    splash_attention_mask as masks,
  )
  block = next(size for size in _SPLASH_BLOCKS if length % size == 0)
  sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                            block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                            block_q_dq=block, block_kv_dq=block)
  mask = masks.MultiHeadMask([masks.CausalMask((length, length)) for _ in range(group)])
  return splash.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)
