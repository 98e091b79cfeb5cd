"""Per-step reporting: TensorBoard scalars and text, a console progress line, <workdir>/log.txt.

The run calls `StepLogger.observe(record)` after every step and `StepLogger.write(record)` on
the steps it logs, on every host; only the chief (process 0) writes files, so multi-host runs
produce one event file and one log. `observe` feeds the windowed learnable share, which sums
every step of its window whether or not the step is logged. Text
summaries: the first `num_text_summaries` environments of the active set (origin, win rates,
regret, hint, first observation, source) and one rollout transcript per arm.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from spade_jax import storage
from spade_jax.metrics import step_scalars
from spade_jax.metrics.env_log import EnvLog
from spade_jax.metrics.tensorboard import SummaryWriter
from spade_jax.selfplay.record import EnvReport, StepRecord

MAX_TEXT_CHARS = 6000  # per source / transcript in a text summary


def _clip(text: str) -> str:
  return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "\n... [cut]"


def _fence(text: str, lang: str = "") -> str:
  return f"```{lang}\n{_clip(text).replace('```', '` ` `')}\n```"


def _num(x: float | None, fmt: str = ".2f") -> str:
  return "n/a" if x is None else format(x, fmt)


def env_markdown(env: EnvReport) -> str:
  """A text-summary card: id, origin, both arms' win rates, the hint and the source."""
  return "\n\n".join([
      f"### {env.uid} ({env.origin}, {env.category})",
      f"win rate no hint {_num(env.win_rate['no_hint'])} · with hint "
      f"{_num(env.win_rate['hint'])} · regret {_num(env.regret, '+.3f')}",
      f"**Hint:** {env.hint or '(none)'}",
      "**First observation:**", _fence(env.first_observation),
      "**Source:**", _fence(env.source, "python")])


def format_duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  h, rem = divmod(seconds, 3600)
  return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


def progress_line(step: int, num_steps: int, m: dict[str, float], eta_s: float) -> str:
  valid = m.get("curriculum/valid_rate")
  return (f"step {step}/{num_steps} | valid {_num(valid)} "
          f"designed {int(m['curriculum/designed_envs'])} "
          f"replayed {int(m['curriculum/replayed_envs'])} "
          f"learnable {m['curriculum/learnable_share_step']:.2f} "
          f"regret {m['curriculum/regret_mean']:+.3f} | "
          f"return {m['agent/return_no_hint']:.3f}/{m['agent/return_hint']:.3f} (no hint/hint) | "
          f"loss {m['train/loss']:.3g} kl {m['train/kl']:.3g} | "
          f"gen {m['time/generate_s']:.1f}s sandbox {m['time/sandbox_s']:.1f}s "
          f"train {m['time/train_s']:.1f}s | ETA {format_duration(eta_s)}")


def no_update_line(record: StepRecord) -> str:
  """What a step without samples says: what was played and why none of it could train."""
  errors = ", ".join(f"{kind} {n}" for kind, n in sorted(record.episode_errors.items()))
  return (f"step {record.step}: no samples, no update ({len(record.envs)} environments, "
          f"{record.unplayable_episodes} episodes unplayable, {record.dropped_episodes} "
          f"dropped; episode errors: {errors or 'none'}; designer valid "
          f"{record.designer_valid}/{record.designer_requests})")


class StepLogger:
  """Turns each StepRecord into scalars, text summaries and a progress line."""

  def __init__(self, workdir: str | os.PathLike[str], num_steps: int, *,
               num_text_summaries: int = 3, embedder=None,
               is_chief: bool = True, stream: TextIO | None = None,
               clock: Callable[[], float] = time.monotonic):
    self.num_steps = num_steps
    self.embedder = embedder  # a vendi.SentenceEmbedder, or None
    self._window = step_scalars.LearnableWindow()
    self._observed: int | None = None
    self.num_text_summaries = num_text_summaries
    self._valid_rate: float | None = None  # of the active set's generation
    self.is_chief = is_chief
    self._stream = stream or sys.stdout
    self._clock = clock
    self._last = clock()
    self._last_step: int | None = None
    self._intervals: list[tuple[float, int]] = []  # (seconds, steps) between writes
    self._writer = SummaryWriter(storage.join(workdir, "tb")) if is_chief else None
    self._env_log = EnvLog(workdir) if is_chief else None
    self._log = storage.Appender(storage.join(workdir, "log.txt")) if is_chief else None

  def eta(self, step: int) -> float:
    """Remaining steps times this process's mean time per step; the first write's interval
    (it includes compilation) is left out once there are others."""
    recent = self._intervals[1:] or self._intervals
    if not recent:
      return math.nan
    per_step = sum(d for d, _ in recent) / sum(n for _, n in recent)
    return (self.num_steps - step) * per_step

  def observe(self, record: StepRecord) -> float | None:
    """Appends the step to curriculum.jsonl and to the learnable-share window; writes the
    share when the window closes (or the run ends) and returns it, else None. Idempotent
    per step."""
    if record.step == self._observed:
      return None
    self._observed = record.step
    if self._env_log is not None:
      self._env_log.append(record)
    share = self._window.add(record)
    if share is None and record.step == self.num_steps:
      share = self._window.value()
    if share is not None and self.is_chief:
      self._writer.scalars({"curriculum/learnable_share": share}, record.step)
      self._writer.flush()
    return share

  def state_dict(self) -> dict:
    """What a resumed run needs to log like an uninterrupted one: the generation's valid rate
    and the open learnable-share window."""
    return {"valid_rate": self._valid_rate, "learnable_window": self._window.state_dict()}

  def load_state_dict(self, state: dict) -> None:
    self._valid_rate = state.get("valid_rate")
    if "learnable_window" in state:
      self._window.load_state_dict(state["learnable_window"])

  def write(self, record: StepRecord) -> dict[str, float]:
    """Writes the step's summaries; returns its scalars."""
    self.observe(record)
    now = self._clock()
    steps = record.step - self._last_step if self._last_step is not None else 1
    self._intervals.append((now - self._last, max(steps, 1)))  # writes may skip steps
    self._last, self._last_step = now, record.step
    metrics = step_scalars.step_metrics(record, self.embedder)
    if record.refreshed:
      self._valid_rate = metrics.get("curriculum/valid_rate")
    elif self._valid_rate is not None:
      metrics["curriculum/valid_rate"] = self._valid_rate
    line = progress_line(record.step, self.num_steps, metrics, self.eta(record.step))
    print(line, file=self._stream, flush=True)
    if not self.is_chief:
      return metrics
    step = record.step
    self._writer.scalars(metrics, step)
    for i, env in enumerate(record.envs[:self.num_text_summaries]):
      self._writer.text(f"envs/{i}", env_markdown(env), step)
    for arm in ("no_hint", "hint"):
      shown = next((e for e in record.envs if e.transcript.get(arm)), None)
      if shown is not None:
        self._writer.text(f"rollouts/{arm}", f"{shown.uid}\n\n{_fence(shown.transcript[arm])}",
                          step)
    if record.designer_invalid_reasons:
      reasons = sorted(record.designer_invalid_reasons.items(), key=lambda kv: -kv[1])
      self._writer.text("designer/invalid_reasons",
                        "\n".join(f"* {k}: {v}" for k, v in reasons), step)
    self._writer.flush()
    self._append_log(line)
    return metrics

  def write_scalars(self, scalars: dict[str, float], step: int) -> None:
    """Extra scalars for `step` (e.g. eval/<suite>/<metric>), also printed and logged."""
    line = f"step {step}: " + " ".join(f"{k}={v:.4f}" for k, v in sorted(scalars.items()))
    print(line, file=self._stream, flush=True)
    if not self.is_chief:
      return
    self._writer.scalars(scalars, step)
    self._writer.flush()
    self._append_log(line)

  def _append_log(self, line: str) -> None:
    self._log.write(line + "\n")
    self._log.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
