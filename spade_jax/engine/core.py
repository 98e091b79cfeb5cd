"""Slot engine: JetStream's Engine contract as pure jitted functions over (graphdef, params).

  prefill(params, prompts)        -> Prefix      prompts run on a fresh cache, first token sampled
  insert(prefix, state, slots)    -> DecodeState the prefix's cache rows copied into decode slots
  append(params, state, slots, .) -> DecodeState new tokens written onto slots' cached prefixes
  generate(params, state, active) -> DecodeState, a block of `decode_steps` tokens for all slots

`append` is the multi-turn extension: a conversation's next turn is prefilled at the end of
its own cache row. Prompt lengths are padded to `prefill_buckets` and prefill batch sizes
to powers of four, so a handful of shapes are compiled once. The decode state is donated to
every call and updated in place; `generate` runs its block of steps in a `lax.while_loop`
that exits early once no slot is alive, so one host round trip covers many tokens.

Rows are kept free of holes: a row's cached tokens have positions 0..end-1 in order, so the
position of the token fed next is `end`. Padding tokens (position -1) are written past the
real ones and overwritten later; the physical cache is `max_cache_len + max bucket` long so
that padding never runs off the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding

from spade_jax.engine import sampling
from spade_jax.engine.api import SamplingParams
from spade_jax.engine.state import (
  DecodeState,
  Prefix,
  SlotParams,
  constrain_state,
  init_decode_state,
  pick_bucket,
  row_buckets,
  state_shardings,
)
from spade_jax.model import KVCache


def _extend(graphdef, params, cache: KVCache, tokens, lengths, sp: SlotParams):
  """Writes tokens [k, T] (first lengths[k] real) at each row's end; samples the next token."""
  k, t = tokens.shape
  start = cache.end  # [k]
  idx = jnp.arange(t)[None, :]
  positions = jnp.where(idx < lengths[:, None], start[:, None] + idx, -1)  # [k, T]
  model = nnx.merge(graphdef, params)
  h, cache = model.hidden(tokens, positions, cache=cache)  # [k, T, D]
  last = h[jnp.arange(k), lengths - 1][:, None]  # [k, 1, D]
  logits = model.logits_from_hidden(last)[:, 0]  # [k, V]
  cache = dataclasses.replace(cache, end=start + lengths)
  keys = sampling.token_keys(sp.seed, start + lengths)
  token, logprob = sampling.sample(logits, keys, sp.temperature, sp.top_p, sp.top_k)
  return cache, token, logprob


@functools.partial(jax.jit, static_argnames=("graphdef", "cache_dtype"))
def _prefill(graphdef, params, tokens, lengths, sp, cache_dtype):
  cfg = nnx.merge(graphdef, params).cfg
  cache = KVCache.init(cfg, tokens.shape[0], tokens.shape[1], cache_dtype)
  cache, token, logprob = _extend(graphdef, params, cache, tokens, lengths, sp)
  return Prefix(cache=cache, token=token, logprob=logprob, slot_params=sp)


def _scatter_rows(state: DecodeState, slots, cache_rows: KVCache, token, sp) -> DecodeState:
  """Writes k rows into the slots (out-of-range slots are padding and dropped). Cache rows
  may be a prefix window [k, l <= L] of the entries; the rest of those rows is untouched."""
  put = lambda full, rows: full.at[(slots,) + tuple(slice(0, n) for n in rows.shape[1:])].set(
      rows, mode="drop")
  return constrain_state(DecodeState(
      cache=jax.tree.map(put, state.cache, cache_rows),
      token=put(state.token, token),
      count=put(state.count, jnp.ones_like(token)),
      slot_params=jax.tree.map(put, state.slot_params, sp)))


@functools.partial(jax.jit, donate_argnames=("state",))
def _insert(prefix: Prefix, state: DecodeState, slots) -> DecodeState:
  length = state.cache.max_len
  t = prefix.cache.max_len

  def widen(x, fill):  # [k, T, ...] -> [k, L, ...]
    pad = [(0, 0), (0, length - t)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, pad, constant_values=fill)

  c = prefix.cache
  rows = KVCache(k=tuple(widen(x, 0) for x in c.k), v=tuple(widen(x, 0) for x in c.v),
                 pos=widen(c.pos, -1), end=c.end)
  return _scatter_rows(state, slots, rows, prefix.token, prefix.slot_params)


@functools.partial(jax.jit, static_argnames=("graphdef", "length"), donate_argnames=("state",))
def _append(graphdef, params, state: DecodeState, slots, starts, tokens, lengths, sp,
            length: int):
  """Runs the chunks on the first `length` entries of the slots' rows (length >= every
  start + chunk bucket), so a short conversation does not pay for the whole cache row."""
  c = state.cache
  take = lambda x: jnp.take(x[:, :length], slots, axis=0, mode="clip")
  rows = KVCache(k=tuple(map(take, c.k)), v=tuple(map(take, c.v)), pos=take(c.pos), end=starts)
  # The host's count of cached tokens is the truth: forget entries past it (tokens the
  # decode loop fed after a stop string, or a previous conversation's), in the whole row.
  stale = jnp.arange(length)[None, :] >= starts[:, None]
  rows = dataclasses.replace(rows, pos=jnp.where(stale, -1, rows.pos))
  rows, token, logprob = _extend(graphdef, params, rows, tokens, lengths, sp)
  full_pos = jnp.full((len(starts), c.max_len), -1, jnp.int32).at[:, :length].set(rows.pos)
  rows = dataclasses.replace(rows, pos=full_pos)
  return _scatter_rows(state, slots, rows, token, sp), token, logprob


def _window(state: DecodeState, width: int, length: int) -> DecodeState:
  """The first `width` slots and first `length` cache entries of the decode state."""
  rows = lambda x: x[:width]
  c = state.cache
  cache = KVCache(k=tuple(x[:width, :length] for x in c.k),
                  v=tuple(x[:width, :length] for x in c.v), pos=c.pos[:width, :length],
                  end=c.end[:width])
  return DecodeState(cache=cache, token=rows(state.token), count=rows(state.count),
                     slot_params=jax.tree.map(rows, state.slot_params))


def _unwindow(state: DecodeState, window: DecodeState) -> DecodeState:
  """Writes a window back into the full state (in place when the state is donated)."""
  put = lambda full, part: full.at[tuple(slice(0, n) for n in part.shape)].set(part)
  return constrain_state(jax.tree.map(put, state, window))


@functools.partial(jax.jit, static_argnames=("graphdef", "num_steps", "width", "length"),
                   donate_argnames=("state",))
def _generate(graphdef, params, state: DecodeState, active, num_steps: int, width: int,
              length: int):
  """num_steps decode steps over the window [width slots, length cache entries]; the rest
  of the state is untouched. Returns the state and tokens, logprobs, valid [width, N]."""
  model = nnx.merge(graphdef, params)
  window = _window(state, width, length)
  sp = window.slot_params

  def step(carry):
    i, alive, st, out_tok, out_lp, out_valid = carry
    cache = st.cache
    pos = jnp.where(alive, cache.end, -1)  # [W] position of the token fed now
    h, new_cache = model.hidden(st.token[:, None], pos[:, None], cache=cache)
    new_cache = dataclasses.replace(new_cache, end=jnp.where(alive, new_cache.end, cache.end))
    logits = model.logits_from_hidden(h)[:, 0]  # [W, V]
    keys = sampling.token_keys(sp.seed, pos + 1)
    tok, lp = sampling.sample(logits, keys, sp.temperature, sp.top_p, sp.top_k)
    count = st.count + alive
    stopped = jnp.any(tok[:, None] == sp.stop_ids, axis=-1) | (count >= sp.limit)
    st = DecodeState(cache=new_cache, token=jnp.where(alive, tok, st.token), count=count,
                     slot_params=sp)
    out_tok = out_tok.at[:, i].set(tok)
    out_lp = out_lp.at[:, i].set(lp)
    out_valid = out_valid.at[:, i].set(alive)
    return i + 1, alive & ~stopped, st, out_tok, out_lp, out_valid

  def cond(carry):
    return (carry[0] < num_steps) & jnp.any(carry[1])

  init = (jnp.int32(0), active[:width], window, jnp.zeros((width, num_steps), jnp.int32),
          jnp.zeros((width, num_steps), jnp.float32), jnp.zeros((width, num_steps), bool))
  _, _, window, out_tok, out_lp, out_valid = jax.lax.while_loop(cond, step, init)
  return _unwindow(state, window), out_tok, out_lp, out_valid


@dataclasses.dataclass(frozen=True)
class Block:
  """Host copy of one generate block: tokens, logprobs [S, N]; valid [S, N] bool."""

  tokens: np.ndarray
  logprobs: np.ndarray
  valid: np.ndarray


class Engine:
  """Slot-level engine over one model. Host-side methods pad to buckets and call the jits."""

  def __init__(self, model: nnx.Module, *, num_slots: int = 8, max_cache_len: int = 1024,
               prefill_buckets: Sequence[int] = (32, 128, 512), decode_steps: int = 16,
               max_stop_ids: int = 8, cache_dtype: str | None = None, mesh=None,
               decode_widths: Sequence[int] | None = None,
               decode_lengths: Sequence[int] | None = None):
    if num_slots < 1 or max_cache_len < 2 or decode_steps < 1 or not prefill_buckets:
      raise ValueError(f"Engine: need num_slots >= 1 (got {num_slots}), max_cache_len >= 2 "
                       f"({max_cache_len}), decode_steps >= 1 ({decode_steps}) and at least "
                       f"one prefill bucket ({prefill_buckets})")
    self.cfg = model.cfg
    self.num_slots = num_slots
    self.max_cache_len = max_cache_len
    self.prefill_buckets = tuple(sorted(set(int(b) for b in prefill_buckets)))
    self.row_buckets = row_buckets(num_slots)
    self.decode_steps = decode_steps
    self.max_stop_ids = max_stop_ids
    self.cache_dtype = jnp.dtype(cache_dtype or self.cfg.compute_dtype)
    self.graphdef, self.params = nnx.split(model)
    if mesh is None:  # a model placed on a mesh brings its mesh
      sharding = getattr(jax.tree.leaves(self.params)[0], "sharding", None)
      mesh = sharding.mesh if isinstance(sharding, NamedSharding) else None
    self.mesh = mesh
    # Decode windows (one compile each): slot counts and cache lengths; the full size last.
    full = max_cache_len + self.max_chunk
    self.decode_widths = _buckets(decode_widths, num_slots, (num_slots // 4,))
    self.decode_lengths = _buckets(decode_lengths, full, (full // 4, full // 2))

  @property
  def max_chunk(self) -> int:
    """Longest prompt piece one prefill call takes; longer prompts go in several appends."""
    return self.prefill_buckets[-1]

  def _mesh(self):
    return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

  def init_decode_state(self) -> DecodeState:
    """Empty slots, committed to their devices (so later calls see one input layout)."""
    state = init_decode_state(self.cfg, self.num_slots, self.max_cache_len + self.max_chunk,
                              self.max_stop_ids, self.cache_dtype)
    if self.mesh is None:
      device = next(iter(jax.tree.leaves(self.params)[0].devices()))
      return jax.device_put(state, device)
    return jax.device_put(state, state_shardings(state, self.mesh))

  def _pad(self, prompts: Sequence[Sequence[int]]):
    """-> tokens [R, T] int32, lengths [R]; R and T rounded up to buckets."""
    if not prompts or any(len(p) == 0 for p in prompts):
      raise ValueError("every prompt needs at least one token")
    t = pick_bucket(max(len(p) for p in prompts), self.prefill_buckets)
    r = pick_bucket(len(prompts), self.row_buckets)
    tokens = np.zeros((r, t), np.int32)
    lengths = np.ones((r,), np.int32)
    for i, p in enumerate(prompts):
      tokens[i, :len(p)] = p
      lengths[i] = len(p)
    return tokens, lengths

  def _slots(self, slots: Sequence[int], rows: int) -> np.ndarray:
    out = np.full((rows,), self.num_slots, np.int32)  # num_slots = out of range = dropped
    out[:len(slots)] = slots
    return out

  def prefill(self, params, prompts: Sequence[Sequence[int]], sampling_params:
              Sequence[SamplingParams], limits: Sequence[int]) -> Prefix:
    """Prefills prompts (each <= the largest bucket) on a fresh cache; samples token 1."""
    tokens, lengths = self._pad(prompts)
    sp = SlotParams.from_requests(sampling_params, limits, self.max_stop_ids, len(lengths))
    with self._mesh():
      return _prefill(self.graphdef, params, tokens, lengths, sp, cache_dtype=self.cache_dtype)

  def insert(self, prefix: Prefix, state: DecodeState, slots: Sequence[int]) -> DecodeState:
    """Moves the prefix's first len(slots) rows into those slots (the rest is padding)."""
    with self._mesh():
      return _insert(prefix, state, self._slots(slots, prefix.token.shape[0]))

  def append(self, params, state: DecodeState, slots: Sequence[int], starts: Sequence[int],
             chunks: Sequence[Sequence[int]], sampling_params: Sequence[SamplingParams],
             limits: Sequence[int]) -> tuple[DecodeState, np.ndarray, np.ndarray]:
    """Writes chunks[i] into slots[i] after its first starts[i] cached tokens (dropping any
    later entries), samples the next token. Returns (state, tokens, logprobs) for the rows.
    Only the first `decode_lengths` bucket of cache entries covering every start + chunk
    bucket is read and written (one compile per row, length and window bucket)."""
    tokens, lengths = self._pad(chunks)
    rows = len(lengths)
    sp = SlotParams.from_requests(sampling_params, limits, self.max_stop_ids, rows)
    start = np.zeros((rows,), np.int32)
    start[:len(starts)] = starts
    length = pick_bucket(int(start.max()) + tokens.shape[1], self.decode_lengths)
    with self._mesh():
      state, tok, lp = _append(self.graphdef, params, state, self._slots(slots, rows), start,
                               tokens, lengths, sp, length=length)
    tok, lp = jax.device_get((tok, lp))
    return state, tok[:len(slots)], lp[:len(slots)]

  def generate(self, params, state: DecodeState, active: np.ndarray,
               max_end: int | None = None) -> tuple[DecodeState, Block]:
    """Up to decode_steps tokens for every active slot; a slot stops after a stop id or when
    its turn's limit is reached (later columns of that row are not valid).

    Only a window is computed: the first `decode_widths` bucket of slots covering every
    active slot, and the first `decode_lengths` bucket of cache entries covering
    `max_end` (the largest cache end of an active slot; None = the whole cache) plus this
    block's steps. Block rows are slots 0..width-1.
    """
    active = np.asarray(active, bool)
    width = pick_bucket(int(np.flatnonzero(active).max(initial=0)) + 1, self.decode_widths)
    full = self.max_cache_len + self.max_chunk
    need = full if max_end is None else min(max_end + self.decode_steps, full)
    length = pick_bucket(need, self.decode_lengths)
    with self._mesh():
      state, tok, lp, valid = _generate(self.graphdef, params, state, active,
                                        num_steps=self.decode_steps, width=width, length=length)
    return state, Block(*jax.device_get((tok, lp, valid)))


def _buckets(given: Sequence[int] | None, full: int, default: Sequence[int]) -> tuple[int, ...]:
  """Sorted window sizes below `full`, then `full` itself."""
  sizes = default if given is None else given
  return tuple(sorted({int(b) for b in sizes if 0 < b < full})) + (full,)
