"""Run whole programs (model-written code under evaluation) in the sandbox pool: pass or fail.

Each `ProgramRun` is one Python program with its stdin and, optionally, the stdout it
must print. It becomes a one-class environment whose `reset` runs the program as
`__main__` with `sys.stdin` / `sys.stdout` replaced by in-memory files and reports the
outcome as its observation; the pool gives it the usual jail (own process, namespaces,
rlimits, seccomp, private /tmp, wall-clock deadline `reset_timeout_s`), so a fork bomb,
a file write or an endless loop fails that run and leaves nothing behind.

Outcomes (`ProgramResult.status`): "passed"; "failed" (an exception, a failed assert or a
non-zero `sys.exit`); "wrong_output" (stdout differs from `expected_stdout` as
whitespace-separated tokens); "timeout" / "crash" (the pool's records); "too_big" (program
plus stdin over the pool's source cap, so it cannot be run); "infra" (the sandbox failed:
not the program's fault, callers must not score it). The verdict is computed inside the
jail next to the program, so a program can forge its own verdict; it cannot reach the host.

Plain Python like the rest of the sandbox package.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from spade_jax.sandbox import contract
from spade_jax.sandbox.api import EnvPool

STATUSES = ("passed", "failed", "wrong_output", "timeout", "crash", "too_big", "infra")

_TEMPLATE = '''\
class ProgramCheck:
  def reset(self, seed=None):
    import io, sys
    program, expected = {program!r}, {expected!r}
    out = io.StringIO()
    sys.stdin, sys.stdout = io.StringIO({stdin!r}), out
    try:
      exec(compile(program, "<program>", "exec"), {{"__name__": "__main__"}})
    except SystemExit as exc:
      if exc.code not in (None, 0):
        return "failed", {{"status": "failed", "detail": "SystemExit(%r)" % (exc.code,)}}
    except BaseException as exc:
      detail = ("%s: %s" % (type(exc).__name__, exc))[:300]
      return "failed", {{"status": "failed", "detail": detail}}
    finally:
      sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
    if expected is not None and out.getvalue().split() != expected.split():
      return "wrong_output", {{"status": "wrong_output", "detail": out.getvalue()[:300]}}
    return "passed", {{"status": "passed", "detail": ""}}

  def step(self, action):
    return "", 0.0, True, False, {{}}
'''


@dataclasses.dataclass(frozen=True)
class ProgramRun:
  program: str  # Python source, run as __main__
  stdin: str = ""
  expected_stdout: str | None = None  # None: passing means finishing without an error


@dataclasses.dataclass(frozen=True)
class ProgramResult:
  status: str  # one of STATUSES
  detail: str = ""

  @property
  def passed(self) -> bool:
    return self.status == "passed"


def program_source(run: ProgramRun) -> str:
  """The one-class environment source that runs `run` in its reset."""
  return _TEMPLATE.format(program=run.program, stdin=run.stdin, expected=run.expected_stdout)


def run_programs(pool: EnvPool, runs: Sequence[ProgramRun],
                 batch_size: int | None = None) -> list[ProgramResult]:
  """Runs every program once, `batch_size` at a time (one batched reset each); in order.

  The deadline is wall clock, so programs running together share the CPUs: the default
  batch, twice the CPU count, keeps a CPU-bound program from timing out because of the
  others (and bounds the live processes).
  """
  batch_size = batch_size or 2 * (os.cpu_count() or 1)
  results: list[ProgramResult] = []
  for start in range(0, len(runs), batch_size):
    results.extend(_run_batch(pool, runs[start:start + batch_size]))
  return results


def _run_batch(pool: EnvPool, runs: Sequence[ProgramRun]) -> list[ProgramResult]:
  sources = [program_source(r) for r in runs]
  results: list[ProgramResult | None] = [None] * len(runs)
  batch = []
  for i, source in enumerate(sources):
    if len(source) > contract.MAX_SOURCE_CHARS:
      results[i] = ProgramResult("too_big", f"program + stdin: {len(source)} characters > the "
                                 f"sandbox's {contract.MAX_SOURCE_CHARS}")
    else:
      batch.append(i)
  keys = [("program", i) for i in batch]
  records = pool.reset([(key, sources[i], 0) for key, i in zip(keys, batch, strict=True)])
  pool.close_episodes(keys)
  for i, record in zip(batch, records, strict=True):
    if record.error_kind in ("timeout", "crash", "infra"):
      results[i] = ProgramResult(record.error_kind, record.error_detail)
    elif record.error_kind is not None:  # the runner's own code cannot raise: the program did
      results[i] = ProgramResult("failed", f"{record.error_kind}: {record.error_detail}")
    else:
      status = record.info.get("status")
      results[i] = ProgramResult(status if status in STATUSES else "failed",
                                 str(record.info.get("detail", ""))[:300])
  return results
