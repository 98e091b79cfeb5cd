r"""Runs the learning matrix of issues 22 / 26 and draws its report, resumably.

    python proj/starter/scripts/learning_runs.py --root runs/learning       # the full matrix
    python proj/starter/scripts/learning_runs.py --config configs/smoke.py --steps 2 --seeds 0 \
        --variants spade,grpo --root /tmp/learning --eval-limit 2 --eval-max-new-tokens 16

Variants (all on one config, one step budget, the same held-out evaluation):
* `discard`, `penalty`, `two_level`: SPADE with `selfplay.designer_advantage` set to that
  choice (the config's field of issue 26);
* `spade`: SPADE with the config as it is;
* `grpo`: the Fixed-env GRPO baseline (`selfplay.fixed_envs=grpo`).
Each (variant, seed) is one `python launch/tpu_run.py --config CONFIG --workdir
ROOT/<variant>/seed<N> --config.seed=N --config.train.num_steps=STEPS ...` subprocess (the
schedule's `rl.total_steps` follows `train.num_steps` unless the config sets it), with
`seed_games_heldout` evaluated in training (`config.eval`; the held-out games kept out of
training; every / limit / reply cap the config's unless `--eval-*` are given) and any
further `--config.*` arguments passed on unchanged. Its output goes to the console
(prefixed) and to <workdir>/launch.log. Ctrl-C or SIGTERM stops the driver and its run; run
the same command again to go on.

Resuming: <workdir>/learning_run.json records the command and every launch. A finished run
is skipped; an interrupted or failed one is launched again with the same command and resumes
from its newest checkpoint (tpu_run does that). A workdir whose record holds another command
is refused: use another --root. Every command is checked first (config overrides parsed and
validated in this process), so a field this tree lacks fails before anything trains. At the
end `learning_report.py` reads every run's TensorBoard events: ROOT/learning.png,
ROOT/learning.md and one JSON summary line on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from absl import flags

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import learning_report  # noqa: E402

from spade_jax import config_schema  # noqa: E402

DEFAULT_CONFIG = "proj/starter/configs/starter.py"
DESIGNER_ADVANTAGES = ("discard", "penalty", "two_level")
VARIANTS: dict[str, tuple[str, ...]] = {
    **{a: (f"--config.selfplay.designer_advantage={a}",) for a in DESIGNER_ADVANTAGES},
    "spade": (),
    "grpo": ("--config.selfplay.fixed_envs=grpo",),
}
DEFAULT_VARIANTS = (*DESIGNER_ADVANTAGES, "grpo")
RECORD = learning_report.RUN_RECORD
LOG = "launch.log"
EVAL_SUITE = "seed_games_heldout"

Launcher = Callable[[Sequence[str], str, str], int]  # (argv, workdir, log prefix) -> exit code


class MatrixError(Exception):
  """Bad input to the driver: one line, no traceback."""


def run_dir(root: str, variant: str, seed: int) -> str:
  return os.path.join(root, variant, f"seed{seed}")


def run_args(config: str, variant: str, seed: int, steps: int, workdir: str,
             args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
  """tpu_run's arguments (no program name) for one (variant, seed)."""
  evals = [f"--config.eval.suites=('{EVAL_SUITE}',)", "--config.eval.hold_out_seed_games=True"]
  for field in ("every", "limit", "max_new_tokens"):  # the config's own unless given
    if getattr(args, f"eval_{field}") is not None:
      evals.append(f"--config.eval.{field}={getattr(args, f'eval_{field}')}")
  return ["--config", config, "--workdir", workdir, f"--config.seed={seed}",
          f"--config.train.num_steps={steps}",
          *VARIANTS[variant], *evals, *extra]


def check_args(argv: Sequence[str], label: str) -> None:
  """Parses and validates the run's config as tpu_run would; one-line MatrixError if bad."""
  fv = flags.FlagValues()
  flags.DEFINE_string("workdir", None, "", flag_values=fv)
  try:
    config, _ = config_schema.parse_config_args(["tpu_run", *argv], fv)
    config_schema.validate(config)
  except (config_schema.ConfigError, flags.Error) as err:
    raise MatrixError(f"{label}: {err}") from None


def read_record(workdir: str) -> dict | None:
  path = os.path.join(workdir, RECORD)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_record(workdir: str, record: dict) -> None:
  os.makedirs(workdir, exist_ok=True)
  tmp = os.path.join(workdir, RECORD + ".tmp")
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
  os.replace(tmp, os.path.join(workdir, RECORD))


def subprocess_launcher(argv: Sequence[str], workdir: str, prefix: str) -> int:
  """Runs tpu_run from the repository root; each output line to the console and the log."""
  os.makedirs(workdir, exist_ok=True)
  cmd = [sys.executable, str(REPO / "launch" / "tpu_run.py"), *argv]
  with open(os.path.join(workdir, LOG), "a", encoding="utf-8") as log, subprocess.Popen(
      cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      bufsize=1) as proc:
    try:
      for line in proc.stdout:
        log.write(line)
        log.flush()
        print(f"[{prefix}] {line}", end="", flush=True)
    except BaseException:  # the driver stops (Ctrl-C, SIGTERM): so does its run
      proc.terminate()
      raise
  return proc.returncode


def same_command(argv: list[str], workdir: str, label: str) -> dict | None:
  """The workdir's record (None if none); MatrixError if it holds another command."""
  record = read_record(workdir)
  if record is not None and record["argv"] != argv:
    raise MatrixError(f"{label}: {workdir}/{RECORD} holds another command ({record['argv']}); "
                      "use another --root")
  return record


def run_one(argv: list[str], workdir: str, label: str, launcher: Launcher,
            clock: Callable[[], float] = time.monotonic) -> str:
  """Launches one run unless its record says it finished; returns 'skipped', 'done' or
  'failed'. A record with another command raises MatrixError."""
  record = same_command(argv, workdir, label)
  if record is not None and record["done"]:
    print(f"{label}: finished before, skipped", flush=True)
    return "skipped"
  record = record or {"argv": argv, "done": False, "launches": []}
  launch = {"started": datetime.datetime.now(datetime.UTC).isoformat(
      timespec="seconds"), "resumed": bool(record["launches"]), "rc": None, "wall_s": None}
  record["launches"].append(launch)
  write_record(workdir, record)  # a killed driver leaves the launch without rc: interrupted
  print(f"{label}: {'resuming' if launch['resumed'] else 'starting'} in {workdir}", flush=True)
  start = clock()
  try:
    rc = launcher(argv, workdir, label)
  finally:
    launch["wall_s"] = round(clock() - start, 3)
    write_record(workdir, record)
  launch["rc"] = rc
  record["done"] = rc == 0
  write_record(workdir, record)
  if rc != 0:
    print(f"{label}: failed (exit {rc}); see {os.path.join(workdir, LOG)}", flush=True)
  return "done" if rc == 0 else "failed"


def resolve_config(arg: str) -> str:
  """The config as an absolute path (the runs start in the repository root)."""
  try:
    path, sep, rest = config_schema.resolve_config_path(arg).partition(":")
  except config_schema.ConfigError as err:
    hint = " (proj/starter/configs/starter.py comes with the starter policy; today pass --config " \
           "configs/smoke.py)" if arg == DEFAULT_CONFIG else ""
    raise MatrixError(f"{err}{hint}") from None
  return f"{os.path.abspath(path)}{sep}{rest}"


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
  p = argparse.ArgumentParser(prog="python proj/starter/scripts/learning_runs.py",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", default=DEFAULT_CONFIG, help="config module or path")
  p.add_argument("--root", default="runs/learning", help="one workdir per variant/seed below")
  p.add_argument("--steps", type=int, default=40, help="training steps of every run")
  p.add_argument("--seeds", default="0,1", help="comma-separated config.seed values")
  p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                 help=f"comma-separated, of {sorted(VARIANTS)}")
  p.add_argument("--eval-every", type=int, default=None,
                 help=f"steps between {EVAL_SUITE} evaluations (0 = none; default: config's)")
  p.add_argument("--eval-limit", type=int, default=None,
                 help="held-out items per evaluation (default: the config's)")
  p.add_argument("--eval-max-new-tokens", type=int, default=None,
                 help="reply cap in evaluation (default: the config's)")
  p.add_argument("--no-report", action="store_true", help="skip the figure and the table")
  p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
  args, extra = p.parse_known_args(argv)
  unknown = [a for a in extra if not a.startswith("--config.")]
  if unknown:
    p.error(f"unrecognised arguments {unknown} (only --config.* overrides pass through)")
  if args.steps < 1:
    p.error(f"--steps={args.steps}: expected >= 1")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  except ValueError:
    p.error(f"--seeds={args.seeds!r}: expected comma-separated ints")
  args.root = os.path.abspath(args.root)  # the runs start in the repository root
  args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
  bad = [v for v in args.variants if v not in VARIANTS]
  if bad or not args.variants or not args.seeds:
    p.error(f"--variants {args.variants} / --seeds {args.seeds}: expected at least one of "
            f"each, variants among {sorted(VARIANTS)}")
  return args, extra


def plan(args: argparse.Namespace, extra: Sequence[str]) -> list[tuple[str, str, list[str]]]:
  """(label, workdir, tpu_run argv) of every run, variants outermost."""
  out = []
  for variant in args.variants:
    for seed in args.seeds:
      workdir = run_dir(args.root, variant, seed)
      out.append((f"{variant}/seed{seed}", workdir,
                  run_args(args.config, variant, seed, args.steps, workdir, args, extra)))
  return out


def main(argv: Sequence[str] | None = None, launcher: Launcher = subprocess_launcher) -> int:
  args, extra = parse(sys.argv[1:] if argv is None else argv)
  try:
    args.config = resolve_config(args.config)
    runs = plan(args, extra)
    for label, workdir, run_argv in runs:  # every run checked before any starts
      if args.dry_run:
        print(shlex.join(["python", "launch/tpu_run.py", *run_argv]))
      else:
        check_args(run_argv, label)
        same_command(run_argv, workdir, label)
    if args.dry_run:
      return 0
    start = time.monotonic()
    outcome = {label: run_one(run_argv, workdir, label, launcher)
               for label, workdir, run_argv in runs}
  except MatrixError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  failed = sorted(k for k, v in outcome.items() if v == "failed")
  print(json.dumps({"driver": "learning_runs", "root": args.root, "runs": outcome,
                    "wall_s": round(time.monotonic() - start, 1)}), flush=True)
  report_rc = 0 if args.no_report else learning_report.main(["--root", args.root])
  return 1 if failed or report_rc else 0


def _exit_on_sigterm(signum, frame) -> None:
  sys.exit(128 + signum)  # unwinds, so the run's record gets its launch's wall time


if __name__ == "__main__":
  signal.signal(signal.SIGTERM, _exit_on_sigterm)
  sys.exit(main())
