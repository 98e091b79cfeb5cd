"""The learned curriculum as data: one JSON line per environment a run ever admitted.

  python -m spade_jax.export --workdir RUN [--step N] --out curriculum.jsonl
  python -m spade_jax.export --workdir RUN [--step N] --adapter OUT  (LoRA runs: PEFT adapter)
  python -m spade_jax.export --workdir RUN [--step N] --merged OUT   (Hugging Face checkpoint)

reads <workdir>/curriculum.jsonl (written every step by the run, `metrics/env_log.py`)
up to step N (default: the last) and writes, per environment, in order of first play:

  uid, origin ("designed", "seed"), category, source, hint,
  designed_step   the step whose designer output it is (None for seeds),
  validation      how it was admitted: designed environments passed the sandbox validator
                  at designed_step ({"valid": true, "by": "sandbox validator"}), seeds are
                  the hand-checked library ({"valid": true, "by": "seed library"});
                  difficulty_levels is the declared number of levels (None if none),
  steps           the steps it was played at, with each step's per-arm win rate and level,
  win_rate        per arm, the mean return over all of its life's surviving episodes,
  regret          win_rate["hint"] - win_rate["no_hint"] over its life (None if an arm is
                  unmeasured, e.g. the fixed-env baselines play no hint arm),
  in_memory       whether it is in the environment memory after step N.

`spade_jax.envs.gym.from_curriculum_line` turns a line into a `gymnasium.Env`. The source is
the one played first; under Fixed-env RLVE it carries the level it was first played at, and
`steps[*].difficulty` says which level each step used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence

from spade_jax import storage
from spade_jax.envs.difficulty import declared_levels
from spade_jax.metrics.env_log import LOG_NAME, read_steps
from spade_jax.model.lora_export import export_weights
from spade_jax.selfplay.record import ARMS

_DESIGNED_UID = re.compile(r"^d(\d+)\.\d+$")


def _mean(values: list[float]) -> float | None:
  return sum(values) / len(values) if values else None


def env_lines(steps: Sequence[dict], upto: int | None = None) -> list[dict]:
  """Per-environment lines from the log's step lines (those with step <= upto)."""
  kept = [s for s in steps if upto is None or s["step"] <= upto]
  if not kept:
    raise ValueError(f"the curriculum log has no step <= {upto}")
  envs: dict[str, dict] = {}
  life: dict[str, dict[str, list[float]]] = {}
  for step in kept:
    for row in step["envs"]:
      uid = row["uid"]
      if uid not in envs:
        designed = _DESIGNED_UID.match(uid)
        envs[uid] = {"uid": uid, "origin": "designed" if designed else "seed",
                     "category": row["category"], "source": None, "hint": None,
                     "designed_step": int(designed.group(1)) if designed else None,
                     "steps": []}
        life[uid] = {arm: [] for arm in ARMS}
      if row.get("source") is not None and envs[uid]["source"] is None:
        envs[uid]["source"], envs[uid]["hint"] = row["source"], row["hint"]
      for arm in ARMS:
        life[uid][arm].extend(row["returns"].get(arm, []))
      envs[uid]["steps"].append({"step": step["step"], "difficulty": row.get("difficulty"),
                                 "win_rate": {a: _mean(row["returns"].get(a, [])) for a in ARMS}})
  memory = set(kept[-1]["memory"])
  out = []
  for uid, env in envs.items():
    if env["source"] is None:
      raise ValueError(f"the curriculum log never recorded the source of {uid!r}")
    win = {arm: _mean(life[uid][arm]) for arm in ARMS}
    env["validation"] = {"valid": True,
                         "by": "sandbox validator" if env["origin"] == "designed"
                         else "seed library",
                         "difficulty_levels": declared_levels(env["source"])}
    env["win_rate"] = win
    env["regret"] = None if None in win.values() else win["hint"] - win["no_hint"]
    env["in_memory"] = uid in memory
    out.append(env)
  return out


def export(workdir: str | os.PathLike[str], out: str | os.PathLike[str],
           step: int | None = None) -> int:
  """Writes the curriculum of `workdir` up to `step` to `out`; returns the number of lines."""
  log = storage.join(workdir, LOG_NAME)  # workdir and out: local paths or gs:// URLs
  if not log.exists():
    raise FileNotFoundError(f"{log} does not exist: is {workdir!r} a run's workdir?")
  lines = env_lines(read_steps(log), step)
  with storage.open_file(out, "w") as f:
    for line in lines:
      f.write(json.dumps(line, ensure_ascii=False) + "\n")
  return len(lines)


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m spade_jax.export",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True,
                      help="the run's output folder (local or gs://), as launch/tpu_run.py had it")
  parser.add_argument("--step", type=int, default=None, help="last step to include")
  parser.add_argument("--out", help="curriculum JSONL to write")
  parser.add_argument("--adapter", help="directory for the LoRA adapter (PEFT format)")
  parser.add_argument("--merged", help="directory for a Hugging Face checkpoint, adapters merged")
  args = parser.parse_args(argv)
  if not (args.out or args.adapter or args.merged):
    parser.error("nothing to export: give --out, --adapter and / or --merged")
  if args.out:
    n = export(args.workdir, args.out, args.step)
    print(f"{args.out}: {n} environments")
  if args.adapter or args.merged:
    for path in export_weights(args.workdir, step=args.step, adapter=args.adapter,
                               merged_dir=args.merged):
      print(f"{path}: written")


if __name__ == "__main__":
  main()
