"""Slot engine: JetStream's Engine contract as pure jitted functions over (graphdef, params).

  prefill(params, prompts)        -> Prefix      prompts run on a fresh cache, first token sampled
  insert(prefix, state, slots)    -> DecodeState the prefix's cache rows copied into decode slots
  append(params, state, slots, .) -> DecodeState new tokens written onto slots' cached prefixes
  generate(params, state, active) -> DecodeState, a block of `decode_steps` tokens for all slots

`append` is the multi-turn extension: a conversation's next turn is prefilled at the end of
its own cache row. Prompt lengths are padded to `prefill_buckets` and prefill batch sizes
to powers of four (rounded up to a multiple of the mesh's batch shards, `state.row_buckets`)
or, with a token budget per call (`prefill_tokens`), to one row count per prompt bucket, so a
handful of shapes are compiled once. The decode state is donated to every call that keeps
its capacity and updated in place; `generate` runs its block of steps in a `lax.while_loop`
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
from spade_jax.engine.capacity import append_row_counts, buckets, cache_lengths
from spade_jax.engine.config import EngineConfig
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
from spade_jax.engine.weights import EngineWeights
from spade_jax.model import KVCache
from spade_jax.model.kv_cache import (
  V_ENTRY_AXIS,
  Rows,
  key_entry_axis,
  read_window,
  row_ids,
  stacked,
  write_entries,
)
from spade_jax.model.sharding import (
  INFERENCE_RULES,
  batch_shards,
  constrain,
  engine_mesh,
  host_get,
  use_rules,
)


def _inference(fn):
  """`fn` traced under the engine's sharding rules (sharding.INFERENCE_RULES), those of the
  weights copy and the decode state."""
  @functools.wraps(fn)
  def traced(*args, **kwargs):
    with use_rules(INFERENCE_RULES):
      return fn(*args, **kwargs)
  return traced


def _for_host(*xs):
  """The arrays replicated on every device: each host reads its own copy (host_get) with no
  collective, which would queue behind the decode block dispatched after them."""
  return tuple(constrain(x, (None,) * x.ndim) for x in xs)


def _extend(graphdef, params, cache: KVCache, tokens, lengths, sp: SlotParams, rows: Rows = None,
            read_len: int | None = None):
  """Writes tokens [k, T] (first lengths[k] real) at the end of cache rows `rows` (see
  Qwen3.hidden), attending their first `read_len` entries; samples each row's next token."""
  k, t = tokens.shape
  start = read_window(cache.end, rows)  # [k]
  idx = jnp.arange(t)[None, :]
  positions = jnp.where(idx < lengths[:, None], start[:, None] + idx, -1)  # [k, T]
  model = nnx.merge(graphdef, params)
  h, cache = model.hidden(tokens, positions, cache=cache, rows=rows, read_len=read_len)
  last = h[jnp.arange(k), lengths - 1][:, None]  # [k, 1, D]
  logits = model.logits_from_hidden(last)[:, 0]  # [k, V]
  end = cache.end.at[row_ids(rows, k)].set(start + lengths, mode="drop")
  keys = sampling.token_keys(sp.seed, start + lengths)
  token, logprob = sampling.sample(logits, keys, sp.temperature, sp.top_p, sp.top_k)
  return dataclasses.replace(cache, end=end), token, logprob


@functools.partial(jax.jit, static_argnames=("graphdef", "cache_dtype"))
@_inference
def _prefill(graphdef, params, tokens, lengths, sp, cache_dtype):
  cfg = nnx.merge(graphdef, params).cfg
  cache = KVCache.init(cfg, tokens.shape[0], tokens.shape[1], cache_dtype)
  cache, token, logprob = _extend(graphdef, params, cache, tokens, lengths, sp)
  return Prefix(cache=cache, token=token, logprob=logprob, slot_params=sp)


def _put_slots(state: DecodeState, cache: KVCache, slots, token, sp) -> DecodeState:
  """The state with `cache` and a new turn (token, count 1, sampling params) in k slots;
  out-of-range slots are padding and dropped."""
  put = lambda full, rows: full.at[slots].set(rows, mode="drop")
  return constrain_state(DecodeState(
      cache=cache, token=put(state.token, token), count=put(state.count, jnp.ones_like(token)),
      slot_params=jax.tree.map(put, state.slot_params, sp)))


def _forget_from(cache: KVCache, slots, starts) -> KVCache:
  """Marks every entry at index >= starts[i] of slot slots[i] empty and sets its end there."""
  stale = jnp.arange(cache.max_len)[None, :] >= starts[:, None]  # [k, L]
  rows = jnp.where(stale, -1, jnp.take(cache.pos, slots, axis=0, mode="clip"))
  return dataclasses.replace(cache, pos=cache.pos.at[slots].set(rows, mode="drop"),
                             end=cache.end.at[slots].set(starts, mode="drop"))


@functools.partial(jax.jit, donate_argnames=("state",))
def _insert(prefix: Prefix, state: DecodeState, slots) -> DecodeState:
  c = prefix.cache
  start = jnp.zeros_like(slots)
  cache = _forget_from(state.cache, slots, start)
  # Every layer of a group's stacked buffers [L_g, S, ...] at once: the write mapped over L_g.
  put = lambda full, new, axis: tuple(
      jax.vmap(lambda f, n: write_entries(f, n, slots, start, axis))(f, n)
      for f, n in zip(full, new, strict=True))
  cache = KVCache(k=put(cache.k, c.k, key_entry_axis()), v=put(cache.v, c.v, V_ENTRY_AXIS),
                  pos=write_entries(cache.pos, c.pos, slots, start),
                  end=cache.end.at[slots].set(c.end, mode="drop"))
  return _put_slots(state, cache, slots, prefix.token, prefix.slot_params)


@functools.partial(jax.jit, static_argnames=("graphdef", "length"), donate_argnames=("state",))
@_inference
def _append(graphdef, params, state: DecodeState, slots, starts, tokens, lengths, sp,
            length: int):
  """Runs the chunks on the first `length` entries of the slots' rows (length >= every
  start + chunk bucket), so a short conversation does not pay for the whole cache row."""
  # The host's count of cached tokens is the truth: forget entries past it (tokens the
  # decode loop fed after a stop string, or a previous conversation's), in the whole row.
  cache = _forget_from(state.cache, slots, starts)
  cache, token, logprob = _extend(graphdef, params, cache, tokens, lengths, sp, rows=slots,
                                  read_len=length)
  return _put_slots(state, cache, slots, token, sp), *_for_host(token, logprob)


@functools.partial(jax.jit, static_argnames=("graphdef", "num_steps"),
                   donate_argnames=("state",))
@_inference
def _generate(graphdef, params, state: DecodeState, active, num_steps: int):
  """num_steps decode steps for every row of the state (the cache is read whole and updated
  in place). Returns the state and tokens, logprobs, valid [rows, N]."""
  model = nnx.merge(graphdef, params)
  sp = state.slot_params
  rows = state.token.shape[0]

  def stopped(token, count):  # [R]: the turn's last sampled token ends it
    return jnp.any(token[:, None] == sp.stop_ids, axis=-1) | (count >= sp.limit)

  def step(carry):
    i, alive, cache, token, count, out_tok, out_lp, out_valid = carry
    pos = jnp.where(alive, cache.end, -1)  # [R] position of the token fed now
    h, new_cache = model.hidden(token[:, None], pos[:, None], cache=cache)
    cache = dataclasses.replace(new_cache, end=jnp.where(alive, new_cache.end, cache.end))
    logits = model.logits_from_hidden(h)[:, 0]  # [R, V]
    keys = sampling.token_keys(sp.seed, pos + 1)
    tok, lp = sampling.sample(logits, keys, sp.temperature, sp.top_p, sp.top_k)
    count = count + alive
    out_tok = out_tok.at[:, i].set(tok)
    out_lp = out_lp.at[:, i].set(lp)
    out_valid = out_valid.at[:, i].set(alive)
    return (i + 1, alive & ~stopped(tok, count), cache, jnp.where(alive, tok, token), count,
            out_tok, out_lp, out_valid)

  def cond(carry):
    return (carry[0] < num_steps) & jnp.any(carry[1])

  # A row the host still counts as active may have ended on the device (in the block before
  # this one, or at its append's first token) before the host read it: it stays stopped.
  init = (jnp.int32(0), active & ~stopped(state.token, state.count), state.cache, state.token,
          state.count, jnp.zeros((rows, num_steps), jnp.int32),
          jnp.zeros((rows, num_steps), jnp.float32), jnp.zeros((rows, num_steps), bool))
  _, _, cache, token, count, out_tok, out_lp, out_valid = jax.lax.while_loop(cond, step, init)
  state = DecodeState(cache=cache, token=token, count=count, slot_params=sp)
  return constrain_state(state), *_for_host(out_tok, out_lp, out_valid)


@functools.partial(jax.jit, donate_argnames=("state",))
def _move(state: DecodeState, src, dst) -> DecodeState:
  """Copies slot src[i] into slot dst[i] (everything: cache row, token, turn); out-of-range
  dst entries are padding and dropped."""
  def move(x, axis=0):  # slots along `axis`
    index = (slice(None),) * axis + (dst,)
    return x.at[index].set(jnp.take(x, src, axis=axis, mode="clip"), mode="drop")

  c = state.cache
  kv = lambda bufs: tuple(move(b, stacked(0)) for b in bufs)  # [L_g, S, ...]
  cache = KVCache(k=kv(c.k), v=kv(c.v), pos=move(c.pos), end=move(c.end))
  return constrain_state(DecodeState(cache=cache, token=move(state.token),
                                     count=move(state.count),
                                     slot_params=jax.tree.map(move, state.slot_params)))


@functools.partial(jax.jit, static_argnames=("cfg", "rows", "length", "max_stop_ids"))
def _resize(state: DecodeState, cfg, rows: int, length: int, max_stop_ids: int) -> DecodeState:
  """A state of `rows` slots x `length` cache entries holding the overlap with `state`;
  new slots are empty (as init_decode_state makes them)."""
  c = state.cache
  new = init_decode_state(cfg, rows, length, max_stop_ids, c.k[0].dtype)

  def overlap(dst, src, axes):  # copies the overlap of src into dst along `axes`
    cut = tuple(slice(0, min(dst.shape[a], src.shape[a])) if a in axes else slice(None)
                for a in range(src.ndim))
    return dst.at[cut].set(src[cut])

  per_row = lambda d, x: overlap(d, x, (0,))
  kv = lambda d, x, axis: tuple(overlap(a, b, (stacked(0), stacked(axis)))
                                for a, b in zip(d, x, strict=True))
  cache = KVCache(k=kv(new.cache.k, c.k, key_entry_axis()), v=kv(new.cache.v, c.v, V_ENTRY_AXIS),
                  pos=overlap(new.cache.pos, c.pos, (0, 1)), end=per_row(new.cache.end, c.end))
  return constrain_state(DecodeState(
      cache=cache,
      token=per_row(new.token, state.token), count=per_row(new.count, state.count),
      slot_params=jax.tree.map(per_row, new.slot_params, state.slot_params)))


@dataclasses.dataclass(frozen=True)
class Block:
  """One generate block: tokens, logprobs [S, N]; valid [S, N] bool. Host arrays, or device
  arrays from `generate(..., read=False)` until the caller reads them (host_get)."""

  tokens: np.ndarray
  logprobs: np.ndarray
  valid: np.ndarray


class SlotEngine:
  """Slot-level engine over one model. Host-side methods pad to buckets and call the jits."""

  def __init__(self, model: nnx.Module, *, num_slots: int = EngineConfig.num_slots,
               max_cache_len: int = EngineConfig.max_cache_len,
               prefill_buckets: Sequence[int] = EngineConfig.prefill_buckets,
               decode_steps: int = EngineConfig.decode_steps_per_poll,
               max_stop_ids: int = 8, cache_dtype: str | None = None, mesh=None,
               decode_widths: Sequence[int] | None = EngineConfig.decode_widths,
               decode_lengths: Sequence[int] | None = EngineConfig.decode_lengths,
               append_lengths: Sequence[int] | None = EngineConfig.append_lengths,
               prefill_tokens: int | None = EngineConfig.prefill_tokens,
               replica_chips: int = EngineConfig.replica_chips):
    if num_slots < 1 or max_cache_len < 2 or decode_steps < 1 or not prefill_buckets:
      raise ValueError(f"SlotEngine: need num_slots >= 1 (got {num_slots}), max_cache_len >= 2 "
                       f"({max_cache_len}), decode_steps >= 1 ({decode_steps}) and at least "
                       f"one prefill bucket ({prefill_buckets})")
    self.cfg = model.cfg
    self.num_slots = num_slots
    self.max_cache_len = max_cache_len
    self.prefill_buckets = tuple(sorted(set(int(b) for b in prefill_buckets)))
    self.decode_steps = decode_steps
    self.max_stop_ids = max_stop_ids
    self.cache_dtype = jnp.dtype(cache_dtype or self.cfg.compute_dtype)
    self.graphdef, params = nnx.split(model)
    if mesh is None:  # a model placed on a mesh brings its mesh
      sharding = getattr(jax.tree.leaves(params)[0], "sharding", None)
      mesh = sharding.mesh if isinstance(sharding, NamedSharding) else None
    # The engine's own mesh: replicas of `replica_chips` chips over the model's devices.
    self.mesh = mesh if mesh is None else engine_mesh(mesh, replica_chips)
    with use_rules(INFERENCE_RULES):  # the rows' split in the engine's programs
      self.batch_shards = batch_shards(self.mesh)
    self.row_buckets = row_buckets(num_slots, self.batch_shards)
    self.prefill_tokens = prefill_tokens
    self.weights = EngineWeights(params, self.cfg, self.mesh)
    abstract = isinstance(jax.tree.leaves(params)[0], jax.ShapeDtypeStruct)
    # The weights every call samples from: the engine's copy (engine/weights.py).
    self.params = self.weights.abstract() if abstract else self.weights.load(params)
    # Decode windows (one compile each): slot counts and cache lengths; the full size last.
    full = max_cache_len + self.max_chunk
    self.decode_widths = buckets(decode_widths, num_slots,
                                 [2 ** i for i in range(3, max(num_slots, 1).bit_length())])
    # ... and what an append's attention reads (one compile each): a window of the cache rows.
    self.decode_lengths, self.append_lengths = cache_lengths(full, decode_lengths,
                                                             append_lengths)

  def load_weights(self, params) -> None:
    """Samples from `params` (an nnx.State shaped like the model's, or a model) from now on:
    `self.params` becomes their copy in the engine's dtype and layout (EngineWeights)."""
    if isinstance(params, nnx.Module):
      params = nnx.state(params)
    self.weights.check(params)
    self.params = None  # the old copy's memory is free for the new one
    self.params = self.weights.load(params)

  @property
  def max_chunk(self) -> int:
    """Longest prompt piece one prefill call takes; longer prompts go in several appends."""
    return self.prefill_buckets[-1]

  def _mesh(self):
    return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

  def init_decode_state(self) -> DecodeState:
    """Empty slots at the smallest capacity (the calls below grow it), committed to their
    devices so later calls see one input layout."""
    state = init_decode_state(self.cfg, self.decode_widths[0], self.decode_lengths[0],
                              self.max_stop_ids, self.cache_dtype)
    return self._place(state)

  def _place(self, state: DecodeState) -> DecodeState:
    if self.mesh is None:
      device = next(iter(jax.tree.leaves(self.params)[0].devices()))
      return jax.device_put(state, device)
    return jax.device_put(state, state_shardings(state, self.mesh))

  @staticmethod
  def capacity(state: DecodeState) -> tuple[int, int]:
    """(slots, cache entries per slot) the state holds now."""
    return state.cache.batch_size, state.cache.max_len

  def reserve(self, state: DecodeState, slots: int, length: int) -> DecodeState:
    """The state resized to the smallest `decode_widths` x `decode_lengths` buckets holding
    `slots` slots and `length` entries each. Shrinking drops slots >= slots and entries >=
    length: the caller vouches that nothing it still needs lives there. A resize copies the
    cache once; the same capacity returns the state untouched."""
    want = (pick_bucket(slots, self.decode_widths), pick_bucket(length, self.decode_lengths))
    if want == self.capacity(state):
      return state
    with self._mesh():
      return _resize(state, self.cfg, *want, max_stop_ids=self.max_stop_ids)

  def move(self, state: DecodeState, src: Sequence[int], dst: Sequence[int]) -> DecodeState:
    """Moves slots src[i] to dst[i] (a source left behind is garbage: the caller frees it),
    so owned slots can be packed low and the capacity shrunk."""
    if len(src) != len(dst):
      raise ValueError(f"move: {len(src)} sources but {len(dst)} destinations")
    rows = self.capacity(state)[0]
    pad = lambda x: np.array(list(x) + [rows] * (rows - len(x)), np.int32)
    with self._mesh():
      return _move(state, pad(src), pad(dst))

  def _grow(self, state: DecodeState, slots: int, length: int) -> DecodeState:
    """The state, grown (never shrunk) to hold `slots` slots and `length` entries."""
    rows, cap = self.capacity(state)
    return self.reserve(state, max(slots, rows), max(length, cap))

  def append_rows(self, chunk: int) -> tuple[int, ...]:
    """Row counts a prefill call of `chunk`-token pieces (a prefill bucket) is padded to
    (`append_row_counts`)."""
    return append_row_counts(chunk, self.num_slots, self.batch_shards, self.prefill_tokens)

  def _pad(self, prompts: Sequence[Sequence[int]]):
    """-> tokens [R, T] int32, lengths [R]; R and T rounded up to buckets."""
    if not prompts or any(len(p) == 0 for p in prompts):
      raise ValueError("every prompt needs at least one token")
    t = pick_bucket(max(len(p) for p in prompts), self.prefill_buckets)
    r = pick_bucket(len(prompts), self.append_rows(t))
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
    state = self._grow(state, max(slots) + 1, prefix.cache.max_len)
    with self._mesh():
      return _insert(prefix, state, self._slots(slots, prefix.token.shape[0]))

  def append(self, params, state: DecodeState, slots: Sequence[int], starts: Sequence[int],
             chunks: Sequence[Sequence[int]], sampling_params: Sequence[SamplingParams],
             limits: Sequence[int], read: bool = True) -> tuple[DecodeState, np.ndarray,
                                                                np.ndarray]:
    """Writes chunks[i] into slots[i] after its first starts[i] cached tokens (dropping any
    later entries), samples the next token. Returns (state, tokens, logprobs) for the rows.
    Attention reads only the first `append_lengths` bucket of entries covering every start +
    chunk bucket (one compile per row, chunk and length bucket). With read=False tokens and
    logprobs stay on the device, padded to the call's rows: the caller reads them later, so
    the host does not wait for the call."""
    tokens, lengths = self._pad(chunks)
    rows = len(lengths)
    sp = SlotParams.from_requests(sampling_params, limits, self.max_stop_ids, rows)
    start = np.zeros((rows,), np.int32)
    start[:len(starts)] = starts
    length = pick_bucket(int(start.max()) + tokens.shape[1], self.append_lengths)
    state = self._grow(state, max(slots) + 1, length)
    with self._mesh():
      state, tok, lp = _append(self.graphdef, params, state, self._slots(slots, rows), start,
                               tokens, lengths, sp, length=length)
    if not read:
      return state, tok, lp
    tok, lp = host_get((tok, lp))
    return state, tok[:len(slots)], lp[:len(slots)]

  def generate(self, params, state: DecodeState, active: np.ndarray,
               max_end: int | None = None, read: bool = True) -> tuple[DecodeState, Block]:
    """Up to decode_steps tokens for every active slot; a slot stops after a stop id or when
    its turn's limit is reached (later columns of that row are not valid).

    Every slot of the state's capacity is computed (inactive ones idle) over its whole cache
    length, so the cache is read in place; `reserve` keeps the capacity small. The state
    first grows to hold the active slots and `max_end` (the largest cache end of an active
    slot; None = the whole cache) plus this block's steps. Block rows are slots 0..rows-1.
    A slot whose turn already ended on the device (a stop id or its limit, in an earlier
    block the host has not read yet) stays stopped. With read=False the Block holds device
    arrays and the host does not wait for the block: the next one can be dispatched before
    this one is read (SlotConversationEngine's double buffering).
    """
    active = np.asarray(active, bool)
    slots = int(np.flatnonzero(active).max(initial=0)) + 1
    full = self.max_cache_len + self.max_chunk
    need = full if max_end is None else min(max_end + self.decode_steps, full)
    state = self._grow(state, slots, need)
    rows = self.capacity(state)[0]
    padded = np.zeros((rows,), bool)
    padded[:min(rows, active.size)] = active[:rows]
    with self._mesh():
      state, tok, lp, valid = _generate(self.graphdef, params, state, padded,
                                        num_steps=self.decode_steps)
    return state, Block(*host_get((tok, lp, valid)) if read else (tok, lp, valid))
