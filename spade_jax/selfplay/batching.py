"""One GRPO batch from the step's agent episodes and the delayed designer samples.

Groups (advantages are normalised within a group, separately per role by the trainer):
  * agent: the G episodes of one environment and one arm at one step, reward = return;
  * designer: the designer samples of one refresh (or refresh and category), reward = the
    delayed designer reward; which designs get a row, and a two-level advantage term, follow
    `selfplay.designer_advantage` (selfplay/designer_advantage.py).
Only tokens the policy sampled carry loss: agent replies (not the prompt, observations or
template tokens between turns) and the designer's output (not its prompt). An agent row ends
at its last sampled token: what follows (a last observation) cannot change any loss token's
log-prob, and may lie past the engine's cache, which bounds the trainer's rows.

Episodes dropped for sandbox infrastructure errors never enter the batch; nor do episodes
without a sampled token (reset failed, prompt too long) or designs without a measured regret.
Whether hint-arm episodes train the agent is `train_agent_on_hint_arm` (docs/selfplay.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from spade_jax.rl.batch import AGENT, DESIGNER, TrainBatch
from spade_jax.selfplay.designer_advantage import DesignerTarget
from spade_jax.selfplay.episodes import Episode


@dataclasses.dataclass(frozen=True)
class Sample:
  """One row of the batch before padding."""

  tokens: list[int]
  loss_mask: list[int]
  logprobs: list[float]
  reward: float
  group: str
  role: int
  offset: float = 0.0  # added to the group-normalised advantage (designer_advantage.py)


def agent_samples(episodes: Iterable[Episode], step: int,
                  train_on_hint_arm: bool) -> list[Sample]:
  out = []
  for ep in episodes:
    if ep.dropped or not any(ep.loss_mask):
      continue
    if ep.spec.arm == "hint" and not train_on_hint_arm:
      continue
    end = max(i for i, m in enumerate(ep.loss_mask) if m) + 1  # the last sampled token
    out.append(Sample(list(ep.tokens[:end]), list(ep.loss_mask[:end]), list(ep.logprobs[:end]),
                      ep.episode_return, f"agent/{step}/{ep.spec.env_uid}/{ep.spec.arm}", AGENT))
  return out


def designer_samples(targets: Iterable[DesignerTarget]) -> list[Sample]:
  out = []
  for item in targets:
    d = item.design
    n_out = len(d.tokens) - d.prompt_len
    if n_out <= 0:
      continue
    out.append(Sample(list(d.tokens), [0] * d.prompt_len + [1] * n_out,
                      [0.0] * d.prompt_len + list(d.logprobs), float(item.reward),
                      item.group, DESIGNER, item.offset))
  return out


def build_train_batch(samples: Sequence[Sample], pad_id: int) -> TrainBatch:
  """Right-pads the rows to a common length; group keys become dense int ids."""
  if not samples:
    raise ValueError("cannot build a TrainBatch from no samples")
  b, t = len(samples), max(len(s.tokens) for s in samples)
  tokens = np.full((b, t), pad_id, np.int32)
  attention = np.zeros((b, t), np.int32)
  loss = np.zeros((b, t), np.float32)
  logprobs = np.zeros((b, t), np.float32)
  groups: dict[str, int] = {}
  for i, s in enumerate(samples):
    n = len(s.tokens)
    if not len(s.loss_mask) == len(s.logprobs) == n:
      raise ValueError(f"sample {i} ({s.group}): {n} tokens, {len(s.loss_mask)} mask entries, "
                       f"{len(s.logprobs)} logprobs")
    tokens[i, :n] = s.tokens
    attention[i, :n] = 1
    loss[i, :n] = s.loss_mask
    logprobs[i, :n] = np.where(np.asarray(s.loss_mask) > 0, s.logprobs, 0.0)
    groups.setdefault(s.group, len(groups))
  return TrainBatch(
      tokens=tokens, attention_mask=attention, loss_mask=loss, behaviour_logprobs=logprobs,
      rewards=np.array([s.reward for s in samples], np.float32),
      group_ids=np.array([groups[s.group] for s in samples], np.int32),
      roles=np.array([s.role for s in samples], np.int32),
      advantage_offsets=np.array([s.offset for s in samples], np.float32))
