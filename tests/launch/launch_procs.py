"""Process helpers for the launch tests (a unique module name: no conftest imports)."""

import os
import re


def _stat(pid: int) -> list[str] | None:
  """The fields of /proc/<pid>/stat after the command name (state first), None if gone."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
      return f.read().rsplit(")", 1)[1].split()
  except (OSError, IndexError):
    return None


def tree_below(pid: int) -> list[int]:
  """Pids of every process below `pid`, from the parent links of all processes."""
  parents = {}
  for entry in os.listdir("/proc"):
    fields = _stat(int(entry)) if entry.isdigit() else None
    if fields:
      parents[int(entry)] = int(fields[1])
  found, frontier = [], {pid}
  while frontier:
    frontier = {p for p, parent in parents.items() if parent in frontier}
    found += sorted(frontier)
  return found


def running(pid: int) -> bool:
  """Alive and not a zombie."""
  fields = _stat(pid)
  return fields is not None and fields[0] != "Z"


def run_report(stderr: str) -> list[str]:
  """stderr less tensorstore's credential lookup, which logs a line at a launch's first GCS
  read on the anonymous emulator (a real bucket has credentials): what the run itself said."""
  return [x for x in stderr.splitlines() if not re.match(r"[EWI]\d{4} .*google_auth_provider", x)]
