"""Validates and plays environment files in the sandbox; one JSON line per file.

  python -m spade_jax.sandbox.check FILE.py [FILE2.py ...] [--seed S] [--actions ACTIONS.txt]

All files go, in order, through one pool of one worker: each is validated, then played
with reset(seed) and the actions (one per line) until the episode ends or the actions
run out. Each line holds {"file", "valid", "reason", "observations", "rewards",
"terminated", "truncated", "return", "error"}: `reason` is null when valid; `error` is
null unless playing ended with an error record ("kind: detail"), or "infra: ..." when the
checker itself failed on the file (the other files still get their lines). Lines are
strict JSON: ASCII, no NaN, no lone surrogates. Environments write only to /dev/null
inside the jail, so nothing they print reaches this output. Exit status 0 whatever the
files contain; 2 for a usage error; 3 if the host cannot provide the requested isolation.
"""

from __future__ import annotations

import argparse
import json
import sys

from spade_jax.sandbox import contract, isolation
from spade_jax.sandbox.pool import SandboxPool


def _empty(path: str) -> dict:
  return {"file": path, "valid": False, "reason": None, "observations": [], "rewards": [],
          "terminated": False, "truncated": False, "return": 0.0, "error": None}


def strict_json(out: dict) -> str:
  """`out` as one line of strict JSON: ASCII, no NaN, lone surrogates replaced by "?"."""
  text = json.dumps(out, ensure_ascii=False, allow_nan=False)
  return json.dumps(json.loads(text.encode("utf-8", "replace")))


def check_line(pool: SandboxPool, path: str, seed: int, actions: list[str]) -> str:
  """The file's line; a failure of the checker itself is that file's "infra" error."""
  try:
    return strict_json(check_file(pool, path, seed, actions))
  except Exception as exc:  # the other files must still get their lines
    return strict_json(dict(_empty(path), error=f"infra: the checker failed on this file: "
                                                f"{type(exc).__name__}: {exc}"[:500]))


def check_file(pool: SandboxPool, path: str, seed: int, actions: list[str]) -> dict:
  out = _empty(path)
  try:
    with open(path, encoding="utf-8") as f:
      source = f.read(contract.MAX_SOURCE_CHARS + 1)
  except (OSError, UnicodeDecodeError) as exc:
    out["reason"] = f"cannot read the file: {exc}"
    return out
  result = pool.validate([source])[0]
  out["valid"], out["reason"] = result.valid, result.reason
  record = pool.reset([(path, source, seed)])[0]
  queue = iter(actions)
  while True:
    if record.error_kind is not None:
      out["error"] = f"{record.error_kind}: {record.error_detail}"
      break
    if out["observations"]:
      out["rewards"].append(record.reward)
    out["observations"].append(record.observation)
    out["terminated"], out["truncated"] = record.terminated, record.truncated
    action = next(queue, None)
    if record.done or action is None:
      break
    record = pool.step([(path, action)])[0]
  pool.close_episodes([path])
  out["return"] = float(sum(out["rewards"]))
  return out


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m spade_jax.sandbox.check",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("files", nargs="+", metavar="FILE.py")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--actions", metavar="ACTIONS.txt", help="one action per line")
  parser.add_argument("--isolation", default="strict", choices=isolation.LEVELS)
  args = parser.parse_args(argv)
  actions = []
  if args.actions:
    try:
      with open(args.actions, encoding="utf-8") as f:
        actions = f.read().splitlines()
    except OSError as exc:
      parser.error(f"cannot read --actions file: {exc}")
  try:
    pool = SandboxPool(num_workers=1, isolation=args.isolation)
  except isolation.SandboxUnavailable as exc:
    print(f"sandbox unavailable: {exc}", file=sys.stderr)
    return 3
  with pool:
    for path in args.files:
      print(check_line(pool, path, args.seed, actions), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
