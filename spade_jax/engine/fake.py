"""`FakeEngine`: the ConversationEngine contract with scripted replies and no model.

Self-play, environment and trainer tests use it to drive whole rollouts in
milliseconds. It keeps the semantics of the real engine (spade_jax.engine.conversation):
  * a conversation's history (every prompt and reply token) persists across turns
    until `release`; each turn's `new_token_ids` are appended to it;
  * at most `num_slots` turns decode at once, the rest queue; each `poll` advances
    every running turn by `steps_per_poll` tokens, so short turns return before long
    ones and callers see completions interleave as they would in production;
  * replies end at stop ids / stop strings / max_new_tokens exactly as in
    `spade_jax.engine.stopping`, and at "cache_full" when the history reaches
    `max_cache_len` tokens.
A scripted reply shorter than max_new_tokens that hits no stop ends with "stop"
(the scripted model chose to stop there).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Sequence

from spade_jax.engine import stopping
from spade_jax.engine.api import Completion, Request, SamplingParams
from spade_jax.engine.config import EngineConfig

# reply_fn(conversation_id, history_token_ids, params) -> tokens, or (tokens, logprobs).
ReplyFn = Callable[[Hashable, tuple[int, ...], SamplingParams],
                   "Sequence[int] | tuple[Sequence[int], Sequence[float]]"]

DEFAULT_LOGPROB = -1.0


@dataclasses.dataclass
class _Turn:
  request: Request
  tokens: list[int]
  logprobs: list[float]
  emitted: int = 0  # how many scripted tokens have been "decoded" so far


class FakeEngine:
  """Scripted ConversationEngine; see the module docstring for the semantics."""

  def __init__(self, reply_fn: ReplyFn, *, num_slots: int = EngineConfig.num_slots,
               steps_per_poll: int = EngineConfig.decode_steps_per_poll,
               max_cache_len: int | None = None,
               detokenize: stopping.Detokenize | None = None):
    if num_slots <= 0 or steps_per_poll <= 0:
      raise ValueError(f"num_slots ({num_slots}) and steps_per_poll ({steps_per_poll}) must be > 0")
    self._reply_fn = reply_fn
    self._num_slots = num_slots
    self._steps_per_poll = steps_per_poll
    self._max_cache_len = max_cache_len
    self._detokenize = detokenize
    self._history: dict[Hashable, list[int]] = {}
    self._queue: collections.deque[Request] = collections.deque()
    self._running: dict[Hashable, _Turn] = {}
    self._done: list[Completion] = []
    self.params = None
    self.num_weight_loads = 0

  def history(self, conversation_id: Hashable) -> tuple[int, ...]:
    """Every token of the conversation so far (prompts and replies)."""
    return tuple(self._history[conversation_id])

  def submit(self, request: Request) -> None:
    stopping.validate_params(request.params, self._detokenize)
    cid = request.conversation_id
    if cid in self._running or any(r.conversation_id == cid for r in self._queue):
      raise ValueError(f"conversation {cid!r} already has a turn in flight")
    if cid not in self._history and not request.new_token_ids:
      raise ValueError(f"conversation {cid!r} is new: its first turn needs a non-empty prompt")
    total = len(self._history.get(cid, ())) + len(request.new_token_ids)
    if cid not in self._history and self._max_cache_len and total >= self._max_cache_len:
      raise ValueError(f"prompt of {total} tokens leaves no room in a cache of "
                       f"max_cache_len={self._max_cache_len}")
    self._history.setdefault(cid, []).extend(int(t) for t in request.new_token_ids)
    self._queue.append(request)

  def poll(self) -> list[Completion]:
    while self._queue and len(self._running) < self._num_slots:
      self._start(self._queue.popleft())
    for cid in list(self._running):
      self._advance(cid)
    done, self._done = self._done, []
    return done

  def pending(self) -> int:
    return len(self._queue) + len(self._running) + len(self._done)

  def release(self, conversation_id: Hashable) -> None:
    """Forgets the conversation; a turn still queued or decoding is cancelled."""
    if conversation_id not in self._history:
      raise KeyError(f"unknown conversation {conversation_id!r}")
    del self._history[conversation_id]
    self._running.pop(conversation_id, None)
    self._queue = collections.deque(r for r in self._queue if r.conversation_id != conversation_id)

  def load_weights(self, params) -> None:
    self.params = params
    self.num_weight_loads += 1

  def _start(self, request: Request) -> None:
    cid = request.conversation_id
    out = self._reply_fn(cid, tuple(self._history[cid]), request.params)
    if isinstance(out, tuple) and len(out) == 2 and not isinstance(out[0], int):
      tokens, logprobs = list(out[0]), list(out[1])
    else:
      tokens = list(out)
      logprobs = [DEFAULT_LOGPROB] * len(tokens)
    if len(logprobs) != len(tokens):
      raise ValueError(f"reply_fn gave {len(tokens)} tokens but {len(logprobs)} logprobs")
    self._running[cid] = _Turn(request, [int(t) for t in tokens], [float(x) for x in logprobs])

  def _advance(self, cid: Hashable) -> None:
    turn = self._running[cid]
    params = turn.request.params
    prior = len(self._history[cid])
    room = (self._max_cache_len - prior) if self._max_cache_len else float("inf")
    turn.emitted = min(turn.emitted + self._steps_per_poll, len(turn.tokens))
    n, reason = stopping.truncate_reply(turn.tokens[:turn.emitted], params, self._detokenize)
    if n >= room and (reason is None or n > room):
      n, reason = max(room, 0), "cache_full"
    elif reason is None and turn.emitted == len(turn.tokens):
      reason = "stop"
    if reason is None:
      return
    del self._running[cid]
    self._history[cid].extend(turn.tokens[:n])
    self._done.append(Completion(cid, turn.tokens[:n], turn.logprobs[:n], reason))
