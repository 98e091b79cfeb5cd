"""What one self-play step reports: the plain data the metrics writer turns into tags.

`SelfPlayLoop.step()` returns a `StepRecord`; `spade_jax.metrics` derives the curriculum
scalars (valid rate, learnable share, Vendi/n, reward levels, formula-reveal rate, ...)
and the text summaries from it. Everything here is plain Python (str, int, float, lists,
dicts), so `dataclasses.asdict(record)` is JSON-serialisable.

Conventions:
  * "win rate" of an arm is the mean episode return over its surviving episodes (returns
    lie in [0, 1]; for a 0/1-reward environment this is exactly the share of wins, for
    partial rewards it is the expected share of the task completed);
  * episodes dropped for sandbox infrastructure errors are counted, never scored; so are
    unplayable ones (first prompt too long for the cache, a reset that failed without an
    infrastructure fault): they are left out of their arm's mean;
  * `None` means "not measured" (an arm without a playable episode): such an environment
    has no regret, never a regret of 0.
"""

from __future__ import annotations

import dataclasses

ARMS = ("no_hint", "hint")
ORIGINS = ("designed", "replayed", "fixed")  # fixed = seed library in fixed-environment mode


@dataclasses.dataclass
class EnvReport:
  """One environment of the step's active set and what the agent did on it this step."""

  uid: str  # stable id: "seed/<name>", "d<refresh_step>.<index>"
  origin: str  # one of ORIGINS
  category: str
  source: str
  hint: str
  first_observation: str  # of the first surviving no-hint episode ("" if none survived)
  returns: dict[str, list[float]]  # arm -> returns of this step's surviving episodes
  step_rewards: dict[str, list[float]]  # arm -> every per-turn reward of those episodes
  win_rate: dict[str, float | None]  # arm -> mean return this step
  regret: float | None  # win_rate["hint"] - win_rate["no_hint"] this step
  dropped_episodes: int  # episodes dropped for infra errors this step
  transcript: dict[str, str]  # arm -> one rendered rollout ("" if none survived)
  difficulty: int | None = None  # the level played (Fixed-env RLVE), None without levels


@dataclasses.dataclass
class StepRecord:
  """Everything one training step produced, for metrics, logs and tests."""

  step: int
  refreshed: bool  # the environment set was (re)built at this step
  num_envs: int  # the step's environment budget (config.selfplay.num_envs)
  # Designer generation (only on refresh steps; zeros otherwise).
  designer_requests: int
  designer_valid: int
  designer_invalid_reasons: dict[str, int]  # parse/validation rule -> count
  # The active environment set played this step.
  designed_envs: int
  replayed_envs: int
  envs: list[EnvReport]
  # The update.
  agent_samples: int
  designer_samples: int  # delayed designer samples trained in this step's update
  designer_rewards: list[float]  # their rewards (regret or invalid reward)
  dropped_episodes: int
  train_metrics: dict[str, float]
  timings: dict[str, float]  # generate_s, sandbox_s, train_s, step_s
  memory_size: int
  memory_uids: list[str] = dataclasses.field(default_factory=list)  # after the step
  designer_regrets: list[float] = dataclasses.field(default_factory=list)  # valid rows' regret
  designs_without_regret: int = 0  # valid due designs not trained: no regret measured
  envs_without_regret: int = 0  # played envs with an arm without a playable episode
  unplayable_episodes: int = 0  # prompt too long / reset failed (not infra): not scored
  episode_errors: dict[str, int] = dataclasses.field(default_factory=dict)  # kind -> episodes

  @property
  def valid_rate(self) -> float | None:
    """Share of this step's designer outputs that were valid (None off refresh steps)."""
    return self.designer_valid / self.designer_requests if self.designer_requests else None

  def mean_win_rate(self, arm: str) -> float | None:
    """Mean over environments of the arm's win rate (environments without data skipped)."""
    values = [e.win_rate[arm] for e in self.envs if e.win_rate[arm] is not None]
    return sum(values) / len(values) if values else None

  def regret_mean(self) -> float | None:
    values = [e.regret for e in self.envs if e.regret is not None]
    return sum(values) / len(values) if values else None

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)
