"""<workdir>/curriculum.jsonl: every step's environments, so the curriculum outlives the run.

One JSON line per step (written by the chief from `StepLogger.observe`, logged step or not):

  {"step": t, "memory": [uids in the memory after the step],
   "envs": [{"uid", "origin", "category", "difficulty", "returns": {arm: [...]},
             "source", "hint"}, ...]}

`source` and `hint` are written the first time this process sees an environment (the
environment memory is bounded, so evicted environments survive only here). A resumed run
appends again from its checkpoint's step: readers keep the last line written for each step
(`read_steps`). `spade_jax.export` turns the log into one line per environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from spade_jax import storage
from spade_jax.selfplay.record import StepRecord

LOG_NAME = "curriculum.jsonl"


class EnvLog:
  """Appends one line per step to <workdir>/curriculum.jsonl."""

  def __init__(self, workdir: str | os.PathLike[str]):
    self.path = storage.join(workdir, LOG_NAME)
    self._log = storage.Appender(self.path)
    self._seen: set[str] = set()

  def append(self, record: StepRecord) -> None:
    envs = []
    for env in record.envs:
      row = {"uid": env.uid, "origin": env.origin, "category": env.category,
             "difficulty": env.difficulty, "returns": env.returns}
      if env.uid not in self._seen:
        row.update(source=env.source, hint=env.hint)
        self._seen.add(env.uid)
      envs.append(row)
    line = {"step": record.step, "memory": list(record.memory_uids), "envs": envs}
    self._log.write(json.dumps(line, ensure_ascii=False) + "\n")
    self._log.flush()


def read_steps(path: str | os.PathLike[str]) -> list[dict]:
  """The log's step lines in step order, the last written line winning for each step."""
  by_step: dict[int, dict] = {}
  for lineno, line in _lines(path):
    try:
      row = json.loads(line)
      by_step[int(row["step"])] = row
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
      raise ValueError(f"{path} line {lineno}: not a curriculum step line") from None
  return [by_step[s] for s in sorted(by_step)]


def _lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
  with storage.open_file(path) as f:
    for lineno, line in enumerate(f, 1):
      if line.strip():
        yield lineno, line
