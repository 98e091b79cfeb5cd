"""Preemption: a SIGTERM or the coordination service's notice stops the run between steps.

A Cloud TPU spot VM gets SIGTERM shortly before it is taken. `StopRequests.reached(step)`,
asked once at every step boundary, answers whether the run must stop there, and every
process gets the same answer at the same step:

* one process: a SIGTERM handler sets a flag (a second SIGTERM ends the process at once);
* several processes (jax.distributed): the coordination service's preemption sync manager,
  which catches SIGTERM in whichever process gets it (and, where the platform has one, the
  TPU's maintenance notice), tells every process and picks the first step that none has
  passed yet: `multihost_utils.reached_preemption_sync_point(step)` turns true at that step
  on all of them (as orbax and MaxText use it).

The loop then saves that step (params, optimiser state, RNG and host state), closes the
sandbox workers and raises `Preempted`; launch/tpu_run.py prints its one line and exits with
`EXIT_PREEMPTED`. Relaunching the same command resumes at the next step.
"""

from __future__ import annotations

import signal
import threading

import jax
from jax.experimental import multihost_utils

# sysexits.h EX_TEMPFAIL: "a temporary failure; the user is invited to retry".
EXIT_PREEMPTED = 75
_SYNC_POINT_NOTICE = "SIGTERM or a preemption notice"  # the sync manager does not say which


class Preempted(Exception):
  """The run stopped at a step boundary on a preemption notice, its state saved."""

  def __init__(self, notice: str, step: int, checkpoint: str):
    self.notice, self.step, self.checkpoint = notice, step, checkpoint
    super().__init__(f"preempted by {notice}: stopped after step {step}, saved {checkpoint}; "
                     f"the same command resumes at step {step + 1}")


class StopRequests:
  """Whether the run stops at a step boundary; see the module docstring. Use as a context
  manager (or call `close`) to put the previous SIGTERM handler back."""

  def __init__(self, start_step: int = 0):
    """`start_step`: the last finished step (the one the run resumes after)."""
    self.notice: str | None = None
    self._sync_point = jax.process_count() > 1 and bool(
        getattr(jax.config, "jax_enable_preemption_service", True))
    self._previous = None
    self._pending = False
    if self._sync_point:
      # The sync manager sets the stop at (the highest step any process last reported) + 1
      # and must hear every step from here on: report where the run starts. A notice that
      # came before (a sync point of `start_step`) stops the run after its first step.
      self._pending = multihost_utils.reached_preemption_sync_point(start_step)
    elif threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._on_signal)

  def _on_signal(self, signum: int, _frame) -> None:
    self.notice = signal.Signals(signum).name
    signal.signal(signum, signal.SIG_DFL)  # a second one is not asked twice

  def reached(self, step: int) -> bool:
    """True when the run must stop after `step` (the same answer on every process)."""
    if self._sync_point:
      if multihost_utils.reached_preemption_sync_point(step) or self._pending:
        self.notice = _SYNC_POINT_NOTICE
        return True
      return False
    if jax.process_count() > 1:  # no sync manager: the processes agree on their flags
      flags = multihost_utils.process_allgather(int(self.notice is not None))
      if flags.any() and self.notice is None:
        self.notice = "SIGTERM to another process"
      return bool(flags.any())
    return self.notice is not None

  def close(self) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
      self._previous = None

  def __enter__(self) -> StopRequests:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
