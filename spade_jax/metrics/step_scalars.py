"""Step metrics computed from the loop's `StepRecord`: curriculum, agent, trainer, timing.

Definitions (also in docs/metrics.md). An arm's win rate is the record's: mean episode return
of the arm (returns lie in [0, 1]; for 0/1 rewards it is the share of wins).
* valid_rate: valid designer outputs / designer outputs of the step's generation (None on
  steps without generation; the logger then carries the active set's value forward).
* invalid/<rule>: designer outputs of the step's generation rejected under each parse or
  validator rule (e.g. no_code_block, tools_ignored, hackable, oracle); only rules that
  occurred, only on generation steps.
* designed_envs / replayed_envs: environments of the active set by origin (replayed includes
  the seed library in fixed-environment mode).
* learnable_share (the paper's Figure 6): over each window of LEARNABLE_WINDOW steps, the
  environments played whose no-hint win rate is in [0.2, 0.8], summed over the window's
  steps, divided by the window's summed environment budget: the share among valid
  environments weighted by their number, with unfilled capacity counting as zero
  (`LearnableWindow`; written at window ends and at the last step).
* learnable_share_step: the same for one step alone.
* regret_mean: mean over environments of win_rate(hint) - win_rate(no hint), over the
  environments that have a regret; envs_without_regret counts those that have none (an arm
  without a playable episode: not scored 0), unplayable_episodes the episodes left out.
* diversity_vendi: Vendi score / n of the active set's sources on the fixed TF-IDF+LSA-128
  embedding, n = environments played (per valid environment); diversity_vendi_per_n: the
  same Vendi score over n = the step's environment budget (config.selfplay.num_envs, the
  paper's 24), so unfilled slots count as no diversity; *_embedding: the same on a
  sentence-embedding model when one is configured (see vendi.py).
* difficulty_mean: mean difficulty level of the environments played (Fixed-env RLVE only).
* reward_levels: mean over environments of the number of distinct per-turn reward values seen
  in the step's episodes (both arms, rounded to 1e-6); partial_reward_levels counts only the
  values strictly inside (0, 1).
* formula_reveal_rate: share of hinted environments whose first observation contains a
  verbatim run of `REVEAL_SPAN` consecutive normalised hint tokens (all of a shorter hint):
  a measurable proxy for "the task prompt already states the method".
A per-environment mean over no environments is nan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from spade_jax.metrics import vendi
from spade_jax.selfplay.record import EnvReport, StepRecord

LEARNABLE_RANGE = (0.2, 0.8)
LEARNABLE_WINDOW = 16  # steps per window of the paper's learnable share
REVEAL_SPAN = 6
REQUIRED_TRAIN = ("loss", "kl", "logprob_gap_mean")  # logged once each, as train/<name>
REQUIRED_TIMINGS = ("generate_s", "sandbox_s", "train_s")
_REVEAL_TOKEN = re.compile(r"[a-z0-9_]+|[=+\-*/^%<>]")


def _mean(xs: Sequence[float]) -> float:
  return float(np.mean(xs)) if len(xs) else float("nan")


def _nan_if_none(x: float | None) -> float:
  return float("nan") if x is None else float(x)


def is_learnable(env: EnvReport) -> bool:
  rate = env.win_rate["no_hint"]
  return rate is not None and LEARNABLE_RANGE[0] <= rate <= LEARNABLE_RANGE[1]


def learnable_count(record: StepRecord) -> int:
  return sum(map(is_learnable, record.envs))


class LearnableWindow:
  """The paper's learnable share: sum of learnable environments / sum of budgets per window.

  Feed every step's record in order; steps t with (t - 1) // size equal share a window. A
  resumed run carries the open window over in the checkpoint (`state_dict`).
  """

  def __init__(self, size: int = LEARNABLE_WINDOW):
    self.size = size
    self._window: int | None = None
    self._learnable = self._budget = 0

  def add(self, record: StepRecord) -> float | None:
    """Adds one step; returns the window's share when this step closes it, else None."""
    window = (record.step - 1) // self.size
    if window != self._window:
      self._window, self._learnable, self._budget = window, 0, 0
    self._learnable += learnable_count(record)
    self._budget += record.num_envs
    return self.value() if record.step % self.size == 0 else None

  def value(self) -> float:
    """The share over the current window's steps so far (nan before any step)."""
    return self._learnable / self._budget if self._budget else float("nan")

  def state_dict(self) -> dict:
    return {"window": self._window, "learnable": self._learnable, "budget": self._budget}

  def load_state_dict(self, state: dict) -> None:
    self._window, self._learnable, self._budget = (state["window"], state["learnable"],
                                                   state["budget"])


def reward_levels(env: EnvReport, partial_only: bool = False) -> int:
  levels = {round(float(r), 6) for rewards in env.step_rewards.values() for r in rewards}
  if partial_only:
    levels = {r for r in levels if 0.0 < r < 1.0}
  return len(levels)


def _reveal_tokens(text: str) -> list[str]:
  return _REVEAL_TOKEN.findall(text.lower())


def reveals_hint(observation: str, hint: str, span: int = REVEAL_SPAN) -> bool:
  """True when `observation` contains `span` consecutive hint tokens (all of a shorter hint)."""
  hint_tokens, obs_tokens = _reveal_tokens(hint), _reveal_tokens(observation)
  n = min(span, len(hint_tokens))
  if n == 0 or len(obs_tokens) < n:
    return False
  obs_grams = {tuple(obs_tokens[i:i + n]) for i in range(len(obs_tokens) - n + 1)}
  return any(tuple(hint_tokens[i:i + n]) in obs_grams for i in range(len(hint_tokens) - n + 1))


def step_metrics(record: StepRecord, embedder=None) -> dict[str, float]:
  """All scalars of one step, keyed by TensorBoard tag (valid_rate only on generation steps).

  `embedder` (a `vendi.SentenceEmbedder`) adds `curriculum/diversity_vendi_embedding`. The
  windowed `curriculum/learnable_share` needs several steps: see `LearnableWindow`.
  """
  train = record.train_metrics
  missing = [f"train_metrics.{k}" for k in REQUIRED_TRAIN if k not in train]
  missing += [f"timings.{k}" for k in REQUIRED_TIMINGS if k not in record.timings]
  if missing:
    raise KeyError(f"StepRecord of step {record.step} lacks {missing}")
  envs = record.envs
  hinted = [e for e in envs if _reveal_tokens(e.hint)]
  returns = {arm: [r for e in envs for r in e.returns[arm]] for arm in ("no_hint", "hint")}
  out = {
      "curriculum/designed_envs": float(record.designed_envs),
      "curriculum/replayed_envs": float(record.replayed_envs),
      "curriculum/learnable_share_step": learnable_count(record) / record.num_envs,
      "curriculum/regret_mean": _nan_if_none(record.regret_mean()),
      "curriculum/diversity_vendi": vendi.vendi_per_n([e.source for e in envs]),
      "curriculum/diversity_vendi_per_n": vendi.vendi_per_n([e.source for e in envs],
                                                            n=record.num_envs),
      "curriculum/envs_without_regret": float(record.envs_without_regret),
      "curriculum/unplayable_episodes": float(record.unplayable_episodes),
      "curriculum/reward_levels": _mean([reward_levels(e) for e in envs]),
      "curriculum/partial_reward_levels": _mean([reward_levels(e, True) for e in envs]),
      "curriculum/formula_reveal_rate": _mean(
          [float(reveals_hint(e.first_observation, e.hint)) for e in hinted]),
      "curriculum/dropped_episodes": float(record.dropped_episodes),
      "curriculum/memory_size": float(record.memory_size),
      "agent/return_no_hint": _mean(returns["no_hint"]),
      "agent/return_hint": _mean(returns["hint"]),
      "agent/win_rate_no_hint": _nan_if_none(record.mean_win_rate("no_hint")),
      "agent/win_rate_hint": _nan_if_none(record.mean_win_rate("hint")),
      "designer/samples": float(record.designer_samples),
      "designer/reward_mean": _mean(record.designer_rewards),
      "designer/regret_valid_mean": _mean(record.designer_regrets),
      "designer/without_regret": float(record.designs_without_regret),
  }
  levels = [e.difficulty for e in envs if e.difficulty is not None]
  if levels:  # Fixed-env RLVE: where the adaptive windows stand
    out["curriculum/difficulty_mean"] = _mean(levels)
  if embedder is not None:
    out["curriculum/diversity_vendi_embedding"] = vendi.vendi_per_n(
        [e.source for e in envs], embedder)
    out["curriculum/diversity_vendi_per_n_embedding"] = vendi.vendi_per_n(
        [e.source for e in envs], embedder, n=record.num_envs)
  if record.valid_rate is not None:
    out["curriculum/valid_rate"] = record.valid_rate
  for reason, count in record.designer_invalid_reasons.items():
    tag = f"curriculum/invalid/{reason.split('/', 1)[-1]}"  # "sandbox/hackable" -> hackable
    out[tag] = out.get(tag, 0.0) + float(count)
  out.update({f"train/{k}": float(v) for k, v in train.items()})
  out.update({f"time/{k}": float(v) for k, v in record.timings.items()})
  return out
