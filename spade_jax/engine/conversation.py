"""`SlotConversationEngine`: the ConversationEngine protocol on top of the slot engine.

Host-side scheduling only; every model computation is one of slot_engine.SlotEngine's jitted calls.
  * A conversation keeps its slot and KV cache between turns. Its next turn feeds only
    what the cache lacks (the last sampled token of the previous reply plus the new
    tokens), written at the end of its cached prefix.
  * Each `poll` first prefills queued turns (batched by length bucket) into slots, then
    runs one block of decode steps for all running turns; a finished turn frees its slot
    for decoding immediately, so short and long requests share slots without waiting.
  * Double buffering (`overlap`, on by default): a poll dispatches its decode block and,
    while the device runs it, reads what was dispatched before (the previous block, this
    poll's first tokens) and returns the turns that ended there; the caller's work between
    polls (the sandbox round) runs while the block decodes. A turn that ended on the device
    in an unread block stays stopped in the next one (SlotEngine.generate); the tokens of a
    turn the host has ended (a stop string, `release`) are dropped when read.
  * When every slot is owned and a queued turn needs one, the least recently used idle
    conversation is evicted (its cache only; its tokens stay on the host and a later
    turn re-prefills them). A turn waits when every slot is decoding.
  * A conversation holds at most `max_cache_len` tokens; a reply that would grow past
    it ends with finish_reason "cache_full" (zero tokens if the conversation was full).
Stop conventions are spade_jax.engine.stopping's.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Hashable

import numpy as np
from flax import nnx

from spade_jax.engine import stopping
from spade_jax.engine.api import Completion, Request
from spade_jax.engine.config import EngineConfig
from spade_jax.engine.slot_engine import SlotEngine
from spade_jax.engine.state import pick_bucket
from spade_jax.model.sharding import host_get


@dataclasses.dataclass
class _Conversation:
  tokens: list[int]  # every token so far: prompts and replies
  cached: int = 0  # how many of `tokens` are in the slot's cache (a prefix)
  slot: int | None = None
  last_used: int = 0


@dataclasses.dataclass
class _Turn:
  request: Request
  limit: int  # tokens this turn may sample: min(max_new_tokens, room left in the cache)
  tokens: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  unread: int = 0  # most tokens it may have sampled in outputs the host has not read yet
  over: bool = False  # finished or cancelled: its rows of unread outputs are dropped


@dataclasses.dataclass(frozen=True)
class _Unread:
  """Device outputs the host has not read: an append's first tokens (tokens, logprobs [k])
  or a decode block (tokens, logprobs, valid [S, N]). rows: (row, the turn it belongs to);
  steps: tokens a row holds at most."""

  arrays: tuple
  rows: list[tuple[int, _Turn]]
  steps: int


class SlotConversationEngine:
  """Continuous-batching ConversationEngine over a model; see the module docstring."""

  def __init__(self, model: nnx.Module, *, num_slots: int = EngineConfig.num_slots,
               max_cache_len: int = EngineConfig.max_cache_len,
               prefill_buckets=EngineConfig.prefill_buckets,
               decode_steps_per_poll: int = EngineConfig.decode_steps_per_poll,
               detokenize: stopping.Detokenize | None = None, max_stop_ids: int = 8,
               cache_dtype: str | None = None, mesh=None,
               decode_widths=EngineConfig.decode_widths,
               decode_lengths=EngineConfig.decode_lengths,
               append_lengths=EngineConfig.append_lengths,
               prefill_tokens: int | None = EngineConfig.prefill_tokens,
               replica_chips: int = EngineConfig.replica_chips, overlap: bool = True):
    """Defaults: `EngineConfig`'s (config.engine); docs/engine.md explains each size.
    overlap=False reads every decode block before returning from the poll that dispatched
    it (no double buffering): the same tokens, for measuring what the overlap gains."""
    self.engine = SlotEngine(model, num_slots=num_slots, max_cache_len=max_cache_len,
                         prefill_buckets=prefill_buckets, decode_steps=decode_steps_per_poll,
                         max_stop_ids=max_stop_ids, cache_dtype=cache_dtype, mesh=mesh,
                         decode_widths=decode_widths, decode_lengths=decode_lengths,
                         append_lengths=append_lengths, prefill_tokens=prefill_tokens,
                         replica_chips=replica_chips)
    self._detokenize = detokenize
    self._state = self.engine.init_decode_state()
    self._owner: list[Hashable | None] = [None] * num_slots
    self._convs: dict[Hashable, _Conversation] = {}
    self._queue: collections.deque[Request] = collections.deque()
    self._running: dict[int, _Turn] = {}  # slot -> turn being decoded
    self._done: list[Completion] = []
    self._unread: list[_Unread] = []  # in dispatch order
    self._overlap = overlap
    self._clock = itertools.count(1)
    self._admitting: set[Hashable] = set()  # conversations admitted in the current poll

  # --- ConversationEngine protocol -------------------------------------------------------

  def submit(self, request: Request) -> None:
    stopping.validate_params(request.params, self._detokenize)
    if len(request.params.stop_token_ids) > self.engine.max_stop_ids:
      raise ValueError(f"{len(request.params.stop_token_ids)} stop_token_ids exceed "
                       f"max_stop_ids={self.engine.max_stop_ids}")
    cid = request.conversation_id
    if self._in_flight(cid):
      raise ValueError(f"conversation {cid!r} already has a turn in flight")
    new = [int(t) for t in request.new_token_ids]
    if any(not 0 <= t < self.engine.cfg.vocab_size for t in new):
      raise ValueError(f"conversation {cid!r}: token ids must be in [0, "
                       f"{self.engine.cfg.vocab_size}), got {new}")
    if cid not in self._convs:
      if not new:
        raise ValueError(f"conversation {cid!r} is new: its first turn needs a non-empty prompt")
      if len(new) >= self.engine.max_cache_len:
        raise ValueError(f"prompt of {len(new)} tokens leaves no room to sample in a cache of "
                         f"max_cache_len={self.engine.max_cache_len}")
      self._convs[cid] = _Conversation(tokens=[])
    self._convs[cid].tokens.extend(new)
    self._queue.append(request)

  def poll(self) -> list[Completion]:
    self._fit_capacity()
    self._admit()
    ahead = 0  # outputs left unread: with overlap, the block this poll dispatches
    if self._running:
      self._unread.append(self._decode_block())
      ahead = int(self._overlap)
    self._read(len(self._unread) - ahead)  # while the block `ahead` decodes
    done, self._done = self._done, []
    return done

  def pending(self) -> int:
    return len(self._queue) + len(self._running) + len(self._done)

  def release(self, conversation_id: Hashable) -> None:
    """Frees the conversation's slot and tokens; a queued or decoding turn is cancelled."""
    conv = self._convs.pop(conversation_id, None)
    if conv is None:
      raise KeyError(f"unknown conversation {conversation_id!r}")
    self._queue = collections.deque(
        r for r in self._queue if r.conversation_id != conversation_id)
    if conv.slot is not None:
      self._owner[conv.slot] = None
      turn = self._running.pop(conv.slot, None)
      if turn is not None:
        turn.over = True

  def load_weights(self, params) -> None:
    """Samples from `params` (an nnx.State shaped like the model's, or a model) from now on,
    through the engine's own copy of them (SlotEngine.load_weights)."""
    self.engine.load_weights(params)

  # --- scheduling ----------------------------------------------------------------------

  @property
  def capacity(self) -> tuple[int, int]:
    """(slots, cache entries per slot) of the decode state now; see `_fit_capacity`."""
    return self.engine.capacity(self._state)

  def conversation_tokens(self, conversation_id: Hashable) -> tuple[int, ...]:
    """Every token of the conversation so far (prompts and replies)."""
    return tuple(self._convs[conversation_id].tokens)

  def _in_flight(self, cid: Hashable) -> bool:
    conv = self._convs.get(cid)
    return (conv is not None and conv.slot in self._running) or any(
        r.conversation_id == cid for r in self._queue)

  def _take_slot(self, conv: _Conversation, cid: Hashable) -> bool:
    """Gives the conversation a slot (its own, a free one, or an evicted idle one)."""
    if conv.slot is not None:
      return True
    free = [s for s, o in enumerate(self._owner) if o is None]
    if not free:
      idle = [s for s, o in enumerate(self._owner)
              if s not in self._running and o not in self._admitting]
      if not idle:
        return False
      victim = min(idle, key=lambda s: self._convs[self._owner[s]].last_used)
      evicted = self._convs[self._owner[victim]]
      evicted.slot, evicted.cached = None, 0
      free = [victim]
    conv.slot, conv.cached = free[0], 0
    self._owner[free[0]] = cid
    return True

  def _fit_capacity(self) -> None:
    """Packs the owned slots low and fits the decode state to them: the `decode_widths`
    bucket of their count, and each one's tokens (queued turns included) plus one decode
    block. Every decode step computes the whole capacity, so it must shrink as episodes and
    long designer requests end; appends and decode blocks grow it again when they need to.
    """
    owned = [s for s, o in enumerate(self._owner) if o is not None]
    if not owned:
      return
    width = pick_bucket(len(owned), self.engine.decode_widths)
    high = [s for s in owned if s >= width]
    low_free = [s for s in range(width) if self._owner[s] is None][:len(high)]
    if high:
      self._state = self.engine.move(self._state, high, low_free)
      for src, dst in zip(high, low_free, strict=True):
        cid, self._owner[src] = self._owner[src], None
        self._owner[dst], self._convs[cid].slot = cid, dst
        if src in self._running:
          self._running[dst] = self._running.pop(src)
    # A decoding conversation's reply (read or not) is not in its tokens until it ends.
    reply = {t.request.conversation_id: self._sampled(t) for t in self._running.values()}
    longest = max(len(c.tokens) + reply.get(cid, 0) for cid, c in self._convs.items()
                  if c.slot is not None)
    full = self.engine.max_cache_len + self.engine.max_chunk
    self._state = self.engine.reserve(self._state, width,
                                      min(longest + self.engine.decode_steps, full))

  def _admit(self) -> None:
    """Moves queued turns into slots and prefills them, batched by length bucket."""
    self._admitting.clear()
    waiting, batch = collections.deque(), []
    while self._queue:
      req = self._queue.popleft()
      conv = self._convs[req.conversation_id]
      if not self._take_slot(conv, req.conversation_id):
        waiting.append(req)
        continue
      self._admitting.add(req.conversation_id)
      conv.last_used = next(self._clock)
      room = self.engine.max_cache_len - len(conv.tokens)
      turn = _Turn(req, limit=min(req.params.max_new_tokens, room))
      if turn.limit <= 0:
        self._finish(turn, "cache_full")
        continue
      batch.append((conv.slot, turn))
    self._queue = waiting
    self._prefill(batch)

  def _prefill(self, batch: list[tuple[int, _Turn]]) -> None:
    """Feeds every turn's uncached tokens in chunks of at most the largest bucket; the
    token sampled after a turn's last chunk is the first token of its reply."""
    pending = list(batch)
    while pending:
      by_bucket: dict[int, list] = collections.defaultdict(list)
      for slot, turn in pending:
        conv = self._convs[turn.request.conversation_id]
        chunk = conv.tokens[conv.cached:conv.cached + self.engine.max_chunk]
        by_bucket[pick_bucket(len(chunk), self.engine.prefill_buckets)].append(
            (slot, turn, conv, chunk))
      pending = []
      for bucket, group in by_bucket.items():  # distinct slots, so at most num_slots rows
        # Calls of exactly a row bucket each (9 rows -> 4 + 4 + 1): no padded rows, but for
        # a last group below the smallest bucket (the mesh's batch shards, or the one row
        # count of a token budget: SlotEngine.append_rows).
        while group:
          rows = max((b for b in self.engine.append_rows(bucket) if b <= len(group)),
                     default=len(group))
          pending += self._append_group(group[:rows])
          group = group[rows:]

  def _append_group(self, group) -> list[tuple[int, _Turn]]:
    """Dispatches one append; the first tokens of the turns it completes stay unread (on
    the device) and the turns decode from the next block on."""
    self._state, tok, lp = self.engine.append(
        self.engine.params, self._state, [g[0] for g in group], [g[2].cached for g in group],
        [g[3] for g in group], [g[1].request.params for g in group], [g[1].limit for g in group],
        read=False)
    unfinished, rows = [], []
    for row, (slot, turn, conv, chunk) in enumerate(group):
      conv.cached += len(chunk)
      if conv.cached < len(conv.tokens):
        unfinished.append((slot, turn))
        continue
      turn.unread += 1
      self._running[slot] = turn
      rows.append((row, turn))
    if rows:
      self._unread.append(_Unread((tok, lp), rows, steps=1))
    return unfinished

  def _sampled(self, turn: _Turn) -> int:
    """Most tokens the turn has sampled: those read and those still on the device."""
    return min(len(turn.tokens) + turn.unread, turn.limit)

  def _decode_block(self) -> _Unread:
    """Dispatches a decode block for every running turn; returns its outputs, unread."""
    active = np.zeros((self.engine.num_slots,), bool)
    active[list(self._running)] = True
    # Cache end of a decoding slot: its cached conversation plus the reply fed so far.
    max_end = max(self._convs[t.request.conversation_id].cached + self._sampled(t) - 1
                  for t in self._running.values())
    self._state, block = self.engine.generate(self.engine.params, self._state, active, max_end,
                                              read=False)
    for turn in self._running.values():
      turn.unread += self.engine.decode_steps
    return _Unread((block.tokens, block.logprobs, block.valid), list(self._running.items()),
                   steps=self.engine.decode_steps)

  def _read(self, n: int) -> None:
    """Reads the first n unread outputs in one transfer into their turns (a row of a turn
    that is over is dropped) and ends the turns they finish."""
    entries, self._unread = self._unread[:n], self._unread[n:]
    entries = [e for e in entries if any(not turn.over for _, turn in e.rows)]
    for entry, (tokens, logprobs, *valid) in zip(entries, host_get([e.arrays for e in entries]),
                                                 strict=True):
      if not valid:  # an append's first tokens [k]: one valid token a row
        tokens, logprobs = tokens[:, None], logprobs[:, None]
        valid = [np.ones(tokens.shape, bool)]
      for row, turn in entry.rows:
        turn.unread -= entry.steps
        if turn.over:
          continue
        keep = valid[0][row]
        turn.tokens.extend(int(t) for t in tokens[row][keep])
        turn.logprobs.extend(float(x) for x in logprobs[row][keep])
        self._check_finished(turn)

  def _check_finished(self, turn: _Turn) -> None:
    """Ends the running turn if a stop id, stop string, max_new_tokens or the cache says so."""
    params = turn.request.params
    n, reason = stopping.truncate_reply(turn.tokens, params, self._detokenize)
    if reason is None and len(turn.tokens) >= turn.limit:  # limit < max_new_tokens
      reason = "cache_full"
    if reason is None:
      return
    del turn.tokens[n:], turn.logprobs[n:]
    del self._running[self._convs[turn.request.conversation_id].slot]
    self._finish(turn, reason)

  def _finish(self, turn: _Turn, reason: str) -> None:
    turn.over = True
    cid = turn.request.conversation_id
    conv = self._convs[cid]
    conv.tokens.extend(turn.tokens)
    # Every reply token except the last was fed to the model; the last is fed next turn.
    conv.cached = min(conv.cached + max(len(turn.tokens) - 1, 0), len(conv.tokens))
    conv.last_used = next(self._clock)
    self._done.append(Completion(cid, list(turn.tokens), list(turn.logprobs), reason))
