"""The refresh schedule and the delayed designer update, as explicit serialisable state.

Steps are numbered from 1 (step t is the t-th update; a checkpoint after it is named t).

Windows: the environment set is rebuilt at every step t with (t - 1) % k == 0, i.e. at
1, k+1, 2k+1, ..., and played by the agent at steps t, t+1, ..., t+k-1 (a fixed curriculum
for k steps). Each environment accumulates the returns of every episode played on it
during its window.

Delay: the designer samples generated at refresh step t are held as `PendingDesign`s and
trained in the update of step t+k, the next refresh step, with the reward computed from the
returns of the whole window. So a step t+k does, in order:
  1. `close_window(t+k, ...)`: score the pending designs of window t (due_step == t+k) with
     the designer reward of their environment's window returns (None for an invalid design;
     selfplay/designer_advantage.py decides what an invalid design's row is);
  2. generate the next designs and `open_window(t+k, envs, designs)`;
  3. play, and train on the agent samples of step t+k plus the scored designs of window t.
The designer is therefore always updated exactly k steps after it sampled, on the regret
measured while the agent played its environments. The run's last step is the exception:
`close_window(T, ..., final=True)` after its play scores every pending design on the returns
its window has so far, so the last refresh's designs are trained too (docs/selfplay.md).

`EnvSchedule.state_dict()` is JSON (lists and numbers only) and goes into checkpoints (key
"curriculum"), so a resumed run continues the window and the pending designer update where
they stopped (`load_state_dict`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from spade_jax.selfplay.designer_rewards import ArmReturns


@dataclasses.dataclass
class ActiveEnv:
  """An environment of the current window."""

  uid: str
  origin: str  # "designed" | "replayed" | "fixed"
  category: str
  source: str
  hint: str
  max_turns: int | None  # the environment's own cap (None: the framework's)
  refresh_step: int
  returns: ArmReturns = dataclasses.field(default_factory=ArmReturns)
  difficulty: int | None = None  # the level `source` is pinned at (Fixed-env RLVE)

  def state_dict(self) -> dict:
    state = dataclasses.asdict(self)
    state["returns"] = self.returns.state_dict()
    return state


@dataclasses.dataclass
class PendingDesign:
  """A designer sample waiting for its delayed update."""

  refresh_step: int
  due_step: int
  index: int
  category: str
  tokens: list[int]  # prompt + output
  prompt_len: int  # tokens[prompt_len:] were sampled by the policy
  logprobs: list[float]  # behaviour log-probs of the output tokens
  env_uid: str | None  # None when the output was invalid
  error: str | None = None
  policy_version: int = 0  # trainer updates the sampling policy had seen

  def state_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ScoredDesign:
  design: PendingDesign
  reward: float | None  # None: invalid, or its environment has no measurement

  @property
  def valid(self) -> bool:
    return self.design.env_uid is not None


class EnvSchedule:
  """Active window, pending designer samples and the refresh rule."""

  def __init__(self, k: int):
    if k < 1:
      raise ValueError(f"config.selfplay.k={k} must be >= 1")
    self.k = k
    self.window_start: int | None = None
    self.active: list[ActiveEnv] = []
    self.pending: list[PendingDesign] = []

  def is_refresh(self, step: int) -> bool:
    if step < 1:
      raise ValueError(f"steps are numbered from 1, got {step}")
    return (step - 1) % self.k == 0 or self.window_start is None

  def close_window(self, step: int, reward_fn: Callable[[ArmReturns], float | None], *,
                   final: bool = False) -> list[ScoredDesign]:
    """Removes and scores the designs due at `step` (their window's returns are final); with
    `final` every pending design, on the returns its window has so far (the run's end)."""
    due = [d for d in self.pending if final or d.due_step <= step]
    self.pending = [d for d in self.pending if not final and d.due_step > step]
    returns = {env.uid: env.returns for env in self.active}
    scored = []
    for design in due:
      if design.env_uid is None:
        scored.append(ScoredDesign(design, None))
      elif design.env_uid in returns:
        scored.append(ScoredDesign(design, reward_fn(returns[design.env_uid])))
      else:
        raise RuntimeError(f"design {design.index} of refresh {design.refresh_step} names env "
                           f"{design.env_uid!r}, which is not in the closing window")
    return scored

  def open_window(self, step: int, envs: list[ActiveEnv], designs: list[PendingDesign]) -> None:
    for design in designs:
      if design.due_step != step + self.k:
        raise ValueError(f"design due at {design.due_step}, expected {step + self.k}")
    self.window_start = step
    self.active = list(envs)
    self.pending.extend(designs)

  def state_dict(self) -> dict:
    return {"k": self.k, "window_start": self.window_start,
            "active": [e.state_dict() for e in self.active],
            "pending": [d.state_dict() for d in self.pending]}

  def load_state_dict(self, state: dict) -> None:
    if state["k"] != self.k:
      raise ValueError(f"the checkpoint's schedule was run with k={state['k']} but "
                       f"config.selfplay.k={self.k}; resume with the same k")
    self.window_start = state["window_start"]
    self.active = [_active_env(e) for e in state["active"]]
    self.pending = [PendingDesign(**d) for d in state["pending"]]


def _active_env(state: dict) -> ActiveEnv:
  returns = ArmReturns()
  returns.load_state_dict(state["returns"])
  return ActiveEnv(**{**state, "returns": returns})


def split_budget(num_envs: int, categories: list[str]) -> list[str]:
  """One category per environment slot, spread evenly (earlier categories get the rest)."""
  if not categories:
    raise ValueError("no skill categories to spread the environment budget over")
  per, extra = divmod(num_envs, len(categories))
  return [c for i, c in enumerate(categories) for _ in range(per + (i < extra))]
