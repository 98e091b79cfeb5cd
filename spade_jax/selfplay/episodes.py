"""Agent episodes: many multi-turn conversations through the engine and the sandbox at once.

Continuous batching: every episode's first turn is submitted together; each `poll` returns
the turns that finished, and those episodes' actions go to the sandbox in ONE batched
`step` call, after which their next turns are submitted. Short episodes never wait for
long ones.

Per episode we keep the full token sequence (prompt, sampled replies exactly as sampled,
observation turns), a loss mask that is 1 only on sampled tokens, their behaviour
log-probs, the per-turn rewards and a transcript.

Action extraction: the text inside the LAST `action_format` match of the reply (the agent
may reason first). A reply without an action does not reach the environment: the episode
gets the explicit observation `MISSING_ACTION` (reward 0, the turn counts), because a
designed environment may reward a lucky substring of free-form reasoning and the agent
would learn to shotgun answers. Exception, per the contract: in a tool-use environment (one
with `tools`) a reply without a tool call is the agent's plain answer to the user and goes
to the environment as raw text.

Truncation: an episode ends after min(config max_turns, the environment's own max_turns)
replies, or when the engine's cache for it is full. An episode whose first prompt does not
fit the cache is not played: it ends at once with return 0 (error "prompt_too_long"), as
the environment's own failure (its first observation is too long).

Sandbox infrastructure errors DROP the episode (it is reported, never scored); the
environment's own errors (exception, timeout, crash, bad output) end it with the rewards it
earned so far.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable, Sequence

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.selfplay import prompts
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.timing import Timings

MISSING_ACTION = ("No action found in your reply. End your reply with exactly one action "
                  "written as {example}.")


def check_action_format(action_format: str) -> None:
  if action_format.count("{}") != 1:
    raise ValueError(f"config.selfplay.action_format={action_format!r}: expected a string with "
                     "exactly one '{}' where the action goes, e.g. '<action>{}</action>'")


def extract_action(text: str, action_format: str) -> str | None:
  """The stripped text inside the last match of `action_format`, None if there is none."""
  prefix, suffix = action_format.split("{}")
  if not prefix and not suffix:
    action = text.strip()
  elif not suffix:
    at = text.rfind(prefix)
    action = text[at + len(prefix):].strip() if at >= 0 else ""
  else:
    pattern = re.escape(prefix) + "(.*?)" + re.escape(suffix)
    matches = re.findall(pattern, text, re.DOTALL)
    action = matches[-1].strip() if matches else ""
  return action or None


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
  error_kind: str | None = None
  error_detail: str = ""

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
        ep.dropped = rec.infra_error
        ep.error_kind, ep.error_detail = rec.error_kind, rec.error_detail
        continue
      ep.tools = rec.info.get("tools") or None
      ep.messages = prompts.agent_messages(rec.observation, self.settings.action_format,
                                           ep.spec.hint, tools=ep.tools is not None)
      ids = self.formatter.prompt_ids(ep.messages, tools=ep.tools)
      limit = self.settings.max_prompt_tokens
      if limit is not None and len(ids) > limit:
        ep.error_kind = "prompt_too_long"
        ep.error_detail = f"first prompt of {len(ids)} tokens > {limit} the engine's cache allows"
        with self.timings.phase("sandbox_s"):
          self.pool.close_episodes([ep.spec.key])
        continue
      ep.append(ids, sampled=False)
      self.live[self._cid(ep)] = ep
      self._submit(ep, ids)

  def _observe(self, ep: Episode, observation: str, role: str, reward: float) -> None:
    """Adds an environment turn; ends the episode at the turn cap, else asks for the next."""
    ep.rewards.append(float(reward))
    ep.messages.append({"role": role, "content": observation})
    if ep.turns >= ep.spec.max_turns:
      ep.truncated = True
      self._finish(ep, close=True)
      return
    reply = ep.tokens[-1:] if ep.loss_mask[-1:] == [1] else []
    ids = self.formatter.turn_ids(observation, reply, role)
    ep.append(ids, sampled=False)
    self._submit(ep, ids)

  def advance(self) -> None:
    """Polls the engine once and steps every episode whose turn completed."""
    with self.timings.phase("generate_s"):
      completions = self.engine.poll()
    to_step = []
    for comp in completions:
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
        continue
      action = extract_action(text, self.settings.action_format)
      if action is None and ep.tools is None:
        example = prompts.action_format_example(self.settings.action_format)
        self._observe(ep, MISSING_ACTION.format(example=example), "user", 0.0)
      else:
        to_step.append((ep, action if action is not None else text.strip(), action is not None))
    if not to_step:
      return
    with self.timings.phase("sandbox_s"):
      records = self.pool.step([(ep.spec.key, action) for ep, action, _ in to_step])
    for (ep, _, called_tool), rec in zip(to_step, records, strict=True):
      if rec.error_kind is not None:
        ep.dropped = rec.infra_error
        ep.error_kind, ep.error_detail = rec.error_kind, rec.error_detail
        ep.rewards.append(0.0)
        self._finish(ep, close=False)
      elif rec.terminated or rec.truncated:
        ep.rewards.append(float(rec.reward))
        ep.messages.append({"role": "user", "content": rec.observation})
        ep.terminated, ep.truncated = rec.terminated, rec.truncated
        self._finish(ep, close=False)
      else:
        role = "tool" if ep.tools is not None and called_tool else "user"
        self._observe(ep, rec.observation, role, rec.reward)


def play_episodes(engine, pool, formatter: ChatFormatter, specs: Sequence[EpisodeSpec],
                  settings: EpisodeSettings, timings: Timings) -> list[Episode]:
  """Plays every spec to the end; returns the episodes in spec order."""
  check_action_format(settings.action_format)
  episodes = [Episode(spec) for spec in specs]
  runner = _Runner(engine, pool, formatter, settings, timings)
  runner.start(episodes)
  while runner.live:
    if not engine.pending():
      raise RuntimeError(f"{len(runner.live)} episodes wait for a turn the engine does not have")
    runner.advance()
  return episodes
