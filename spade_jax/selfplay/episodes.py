"""Agent episodes: many multi-turn conversations through the engine and the sandbox at once.

Continuous batching: every episode's first turn is submitted together; each `poll` returns
the turns that finished, and those episodes' actions go to the sandbox in ONE batched
`step` call, after which their next turns are submitted. Short episodes never wait for
long ones. The engine's poll leaves the decode block it dispatched running (double
buffering, engine/conversation.py), so the sandbox round runs while the device decodes.

Per episode we keep the full token sequence (prompt, sampled replies exactly as sampled,
observation turns), a loss mask that is 1 only on sampled tokens, their behaviour
log-probs, the per-turn rewards and a transcript.

Replies go through `spade_jax.selfplay.replies.parse_reply`, the same parser for both
settings: reasoning in <think> never counts; a tool-use environment (one with `tools`) gets
each <tool_call> of a reply as a parsed {"name", "arguments"} object, in order, each result
its own tool turn (the consecutive results are rendered together, as the chat template
renders them); a reply without a call is the agent's plain answer to the user and goes to
the environment as text. A games environment gets the text of the last action-format match.
What cannot be dispatched (no action, malformed JSON, an undeclared tool) does not reach the
environment: the agent gets an explicit error observation (reward 0, the turn counts),
because a designed environment may reward a lucky substring of free-form reasoning and the
agent would learn to shotgun answers.

Truncation: an episode ends after min(config max_turns, the environment's own max_turns)
replies, or when the engine's cache for it is full. An episode whose first prompt does not
fit the cache is not played (error "prompt_too_long"), nor is one whose reset failed without
an infrastructure fault: both are *unplayable*, left out of their arm's mean rather than
scored 0. A hint lengthens the prompt, so near the cache limit the hint arm would otherwise
read as the environment's failure (a regret of minus the no-hint mean).

Sandbox infrastructure errors DROP the episode (it is reported, never scored); the
environment's own errors (exception, timeout, crash, bad output) end it with the rewards it
earned so far, except a running return that left [0, 1] (RETURN_RANGE_ERROR):
then every reward of the episode is discarded (return 0), since they no longer add up to
a return. Dropping it instead would let an environment choose which episodes count. What
the chat template or the tokenizer cannot render (a template that refuses a first
observation, text it cannot encode) ends that episode alone with a `bad_output` error:
unplayable when it is the first prompt, scored so far when it is a later turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.sandbox.contract import RETURN_RANGE_ERROR
from spade_jax.selfplay import prompts, replies
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.timing import Timings


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
  """One episode to play: which environment, which arm, which reset seed."""

  key: Hashable  # unique among the step's episodes
  env_uid: str
  arm: str  # "no_hint" | "hint"
  source: str
  hint: str | None  # shown to the agent only in the hint arm
  seed: int  # reset seed (independent per episode)
  sample_seed: int  # engine sampling seed of the first turn (+turn for later turns)
  max_turns: int


@dataclasses.dataclass
class Episode:
  spec: EpisodeSpec
  tokens: list[int] = dataclasses.field(default_factory=list)
  loss_mask: list[int] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  rewards: list[float] = dataclasses.field(default_factory=list)
  messages: list[dict] = dataclasses.field(default_factory=list)
  tools: list | None = None
  turns: int = 0
  terminated: bool = False
  truncated: bool = False
  dropped: bool = False  # sandbox infrastructure error: never scored
  unplayable: bool = False  # never started (prompt too long, reset failed): never scored
  error_kind: str | None = None
  error_detail: str = ""

  @property
  def playable(self) -> bool:
    """Counts in its arm's mean: it started and no infrastructure fault dropped it."""
    return not (self.dropped or self.unplayable)

  @property
  def episode_return(self) -> float:
    return float(sum(self.rewards))

  @property
  def first_observation(self) -> str:
    return self.messages[1]["content"] if len(self.messages) > 1 else ""

  def append(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] = ()) -> None:
    self.tokens.extend(int(t) for t in ids)
    self.loss_mask.extend([int(sampled)] * len(ids))
    values = [float(x) for x in logprobs] if sampled else [0.0] * len(ids)
    if len(values) != len(ids):
      raise ValueError(f"{len(ids)} sampled tokens came with {len(values)} logprobs")
    self.logprobs.extend(values)

  def transcript(self) -> str:
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)


@dataclasses.dataclass(frozen=True)
class EpisodeSettings:
  action_format: str
  params: SamplingParams  # per-turn sampling; seed is replaced per episode and turn
  max_prompt_tokens: int | None = None  # longer first prompts cannot be played


class _Runner:
  """State of one batch of episodes being played."""

  def __init__(self, engine, pool, formatter: ChatFormatter, settings: EpisodeSettings,
               timings: Timings):
    self.engine, self.pool, self.formatter = engine, pool, formatter
    self.settings, self.timings = settings, timings
    self.live: dict[Hashable, Episode] = {}

  def _cid(self, ep: Episode) -> tuple:
    return ("agent", ep.spec.key)

  def _submit(self, ep: Episode, ids: list[int]) -> None:
    params = dataclasses.replace(self.settings.params, seed=ep.spec.sample_seed + ep.turns)
    with self.timings.phase("generate_s"):
      self.engine.submit(Request(self._cid(ep), ids, params))

  def _finish(self, ep: Episode, close: bool) -> None:
    self.live.pop(self._cid(ep), None)
    self.engine.release(self._cid(ep))
    if close:
      with self.timings.phase("sandbox_s"):
        self.pool.close_episodes([ep.spec.key])

  def start(self, episodes: Sequence[Episode]) -> None:
    with self.timings.phase("sandbox_s"):
      records = self.pool.reset([(e.spec.key, e.spec.source, e.spec.seed) for e in episodes])
    for ep, rec in zip(episodes, records, strict=True):
      if rec.error_kind is not None:
        ep.dropped, ep.unplayable = rec.infra_error, not rec.infra_error
        ep.error_kind, ep.error_detail = rec.error_kind, rec.error_detail
        continue
      ep.tools = rec.info.get("tools") or None
      ep.messages = prompts.agent_messages(rec.observation, self.settings.action_format,
                                           ep.spec.hint, tools=ep.tools is not None)
      try:
        ids = self.formatter.prompt_ids(ep.messages, tools=ep.tools)
      except Exception as exc:  # the environment's text: this episode's failure alone
        self._not_played(ep, "bad_output", f"the first prompt cannot be rendered: "
                         f"{type(exc).__name__}: {exc}"[:500])
        continue
      limit = self.settings.max_prompt_tokens
      if limit is not None and len(ids) > limit:
        self._not_played(ep, "prompt_too_long",
                         f"first prompt of {len(ids)} tokens > {limit} the engine's cache allows")
        continue
      ep.append(ids, sampled=False)
      self.live[self._cid(ep)] = ep
      self._submit(ep, ids)

  def _not_played(self, ep: Episode, kind: str, detail: str) -> None:
    """The episode is unplayable (never scored): its first prompt cannot be sent."""
    ep.error_kind, ep.error_detail, ep.unplayable = kind, detail, True
    with self.timings.phase("sandbox_s"):
      self.pool.close_episodes([ep.spec.key])

  def _continue(self, ep: Episode, new_messages: list[dict]) -> None:
    """Ends the episode at the turn cap, else sends the environment's turns and asks again."""
    ep.messages.extend(new_messages)
    if ep.turns >= ep.spec.max_turns:
      ep.truncated = True
      self._finish(ep, close=True)
      return
    reply = ep.tokens[-1:] if ep.loss_mask[-1:] == [1] else []
    try:
      ids = self.formatter.turn_ids(new_messages, reply)
    except Exception as exc:  # the environment's text: this episode's failure alone
      detail = f"the environment's turn cannot be rendered: {type(exc).__name__}: {exc}"
      ep.error_kind, ep.error_detail = "bad_output", detail[:500]
      self._finish(ep, close=True)
      return
    ep.append(ids, sampled=False)
    self._submit(ep, ids)

  def _receive(self, comp) -> list[replies.ReplyPart] | None:
    """Records a finished turn; returns the parts of its reply to dispatch (None: it ended)."""
    ep = self.live[comp.conversation_id]
    ep.append(comp.tokens, sampled=True, logprobs=comp.logprobs)
    ep.turns += 1
    ids = comp.tokens
    stops = self.settings.params.stop_token_ids
    stopped = ids and comp.finish_reason == "stop" and ids[-1] in stops
    text = self.formatter.tokenizer.decode(ids[:-1] if stopped else ids)
    ep.messages.append({"role": "assistant", "content": text})
    if comp.finish_reason == "cache_full":
      ep.truncated = True
      self._finish(ep, close=True)
      return None
    return list(replies.parse_reply(text, tools=ep.tools,
                                    action_format=self.settings.action_format).parts)

  def _end(self, ep: Episode, new_messages: list[dict], rec) -> None:
    """The episode ended on `rec`: an environment or sandbox error, or done."""
    if rec.error_kind is not None:
      ep.dropped = rec.infra_error
      ep.error_kind, ep.error_detail = rec.error_kind, rec.error_detail
      if rec.error_detail.startswith(RETURN_RANGE_ERROR):
        ep.rewards = [0.0] * len(ep.rewards)
    else:
      ep.messages.extend(new_messages)
      ep.terminated, ep.truncated = rec.terminated, rec.truncated
    self._finish(ep, close=False)

  def advance(self) -> None:
    """Polls the engine once and dispatches the parts of every reply that completed: one
    batched sandbox `step` per round, the k-th dispatchable part of each reply in round k."""
    with self.timings.phase("generate_s"):
      completions = self.engine.poll()
    queued = {}  # conversation id -> (episode, parts left, the environment's new messages)
    for comp in completions:
      parts = self._receive(comp)
      if parts is not None:
        queued[comp.conversation_id] = (self.live[comp.conversation_id], parts, [])
    while queued:
      batch = []
      for cid, (ep, parts, new) in list(queued.items()):
        while parts and parts[0].kind == "error":
          ep.rewards.append(0.0)
          new.append({"role": "tool" if ep.tools else "user", "content": parts.pop(0).error})
        if parts:
          batch.append((cid, parts.pop(0)))
        else:
          del queued[cid]
          self._continue(ep, new)
      if not batch:
        continue
      with self.timings.phase("sandbox_s"):
        records = self.pool.step([(queued[cid][0].spec.key, part.action) for cid, part in batch])
      for (cid, part), rec in zip(batch, records, strict=True):
        ep, _, new = queued[cid]
        ep.rewards.append(0.0 if rec.error_kind is not None else float(rec.reward))
        new.append({"role": "tool" if part.kind == "call" else "user",
                    "content": rec.observation})
        if rec.done:
          del queued[cid]
          self._end(ep, new, rec)


def play_episodes(engine, pool, formatter: ChatFormatter, specs: Sequence[EpisodeSpec],
                  settings: EpisodeSettings, timings: Timings) -> list[Episode]:
  """Plays every spec to the end; returns the episodes in spec order."""
  replies.check_action_format(settings.action_format)
  episodes = [Episode(spec) for spec in specs]
  runner = _Runner(engine, pool, formatter, settings, timings)
  runner.start(episodes)
  while runner.live:
    if not engine.pending():
      raise RuntimeError(f"{len(runner.live)} episodes wait for a turn the engine does not have")
    runner.advance()
  return episodes
