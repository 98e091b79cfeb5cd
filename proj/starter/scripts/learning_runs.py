r"""Runs the learning matrix of issues 22 / 26 and draws its report, resumably.

    python proj/starter/scripts/learning_runs.py --root runs/learning       # the full matrix
    python proj/starter/scripts/learning_runs.py --config configs/smoke.py --steps 2 --seeds 0 \
        --variants spade,grpo --root /tmp/learning --eval-limit 2 --eval-max-new-tokens 16

Variants (all on one config, one step budget, the same held-out evaluation):
* `discard`, `penalty`, `two_level`: SPADE with `selfplay.designer_advantage` set to that
  choice (the config's field of issue 26);
* `spade`: SPADE with the config as it is;
* `spade_frozen`: SPADE with a frozen designer (`selfplay.train_designer=False`);
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

Matrix mode (issue 49), the pre-registered learning matrix:

    python proj/starter/scripts/learning_runs.py --matrix --root runs/matrix

Its defaults: --config proj/starter/configs/matrix.py, --steps 120, --seeds 0,1,2, --variants
spade,spade_frozen,grpo; the runs evaluate `minigames_heldout` (the config's every / limit /
reply cap unless `--eval-*` are given). In order, each stage resumable:
1. the learning-rate sweep: Fixed-env GRPO, seed 0, --sweep-steps steps, one run per lr of
   --sweep-lrs in ROOT/sweep/lr<lr>/seed0 (`--config.rl.learning_rate=<lr>`), held-out
   evaluation off. The lr whose run has the highest mean agent/return_no_hint over its last
   SWEEP_LAST logged steps wins (ties: the smaller lr): the training return only, so no
   held-out item takes part in the choice. ROOT/sweep/choice.json {"lrs", "scores",
   "chosen", "metric"} records it; a later call with the same lrs reuses it and sweeps no more.
2. the baseline: the starting checkpoint's held-out records, ROOT/baseline.jsonl, by one
   `python -m proj.starter eval` with the runs' checkpoint, tokenizer and evaluation sampling
   (read from the runs' parsed config); skipped when the file holds all 280 items.
3. the runs, every variant x seed with `--config.rl.learning_rate=<chosen>`.
4. the report, and `matrix_criteria.py`'s pre-registered criteria (ROOT/criteria.md, one JSON
   line); `--no-report` skips both.
`--dry-run` prints every command (the runs' lr is `<chosen>` until choice.json exists).
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
from ml_collections import ConfigDict

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import learning_report  # noqa: E402
import matrix_criteria  # noqa: E402
import numpy as np  # noqa: E402

from spade_jax import config_schema  # noqa: E402

DEFAULT_CONFIG = "proj/starter/configs/starter.py"
MATRIX_CONFIG = "proj/starter/configs/matrix.py"
DESIGNER_ADVANTAGES = ("discard", "penalty", "two_level")
VARIANTS: dict[str, tuple[str, ...]] = {
    **{a: (f"--config.selfplay.designer_advantage={a}",) for a in DESIGNER_ADVANTAGES},
    "spade": (),
    "spade_frozen": ("--config.selfplay.train_designer=False",),
    "grpo": ("--config.selfplay.fixed_envs=grpo",),
}
DEFAULT_VARIANTS = (*DESIGNER_ADVANTAGES, "grpo")
MATRIX_VARIANTS = ("spade", "spade_frozen", "grpo")
RECORD = learning_report.RUN_RECORD
LOG = "launch.log"
EVAL_SUITE = "seed_games_heldout"
EVAL_ARGS = {  # by --matrix: the held-out suite the runs evaluate
    False: (f"--config.eval.suites=('{EVAL_SUITE}',)", "--config.eval.hold_out_seed_games=True"),
    True: (f"--config.eval.suites=('{matrix_criteria.SUITE}',)",),
}
SWEEP_METRIC = "agent/return_no_hint"  # the training return: no held-out item picks the lr
SWEEP_LAST = 10  # logged steps at the end of a sweep run
CHOICE = "choice.json"

# (argv, workdir, log prefix) -> exit code; argv: tpu_run's arguments, or `-m <module> ...`
Launcher = Callable[[Sequence[str], str, str], int]
Planned = list[tuple[str, str, list[str]]]  # (label, workdir, tpu_run argv) of each run


class MatrixError(Exception):
  """Bad input to the driver: one line, no traceback."""


def run_dir(root: str, variant: str, seed: int) -> str:
  return os.path.join(root, variant, f"seed{seed}")


def run_args(config: str, variant: str, seed: int, steps: int, workdir: str,
             args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
  """tpu_run's arguments (no program name) for one (variant, seed)."""
  evals = list(EVAL_ARGS[args.matrix])
  for field in ("every", "limit", "max_new_tokens"):  # the config's own unless given
    if getattr(args, f"eval_{field}") is not None:
      evals.append(f"--config.eval.{field}={getattr(args, f'eval_{field}')}")
  return ["--config", config, "--workdir", workdir, f"--config.seed={seed}",
          f"--config.train.num_steps={steps}",
          *VARIANTS[variant], *evals, *extra]


def check_args(argv: Sequence[str], label: str, validate: bool = True) -> ConfigDict:
  """The run's config parsed (and validated, unless not `validate`) as tpu_run would;
  one-line MatrixError if bad."""
  fv = flags.FlagValues()
  flags.DEFINE_string("workdir", None, "", flag_values=fv)
  try:
    config, _ = config_schema.parse_config_args(["tpu_run", *argv], fv)
    if validate:
      config_schema.validate(config)
  except (config_schema.ConfigError, flags.Error) as err:
    raise MatrixError(f"{label}: {err}") from None
  return config


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
  program = [] if argv[:1] == ["-m"] else [str(REPO / "launch" / "tpu_run.py")]
  cmd = [sys.executable, *program, *argv]
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
  p.add_argument("--matrix", action="store_true",
                 help="issue 49's matrix: lr sweep, baseline, runs, criteria (see above)")
  p.add_argument("--config", default=None,
                 help=f"config module or path (default {DEFAULT_CONFIG}; --matrix: "
                      f"{MATRIX_CONFIG})")
  p.add_argument("--root", default="runs/learning", help="one workdir per variant/seed below")
  p.add_argument("--steps", type=int, default=None,
                 help="training steps of every run (default 40; --matrix: 120)")
  p.add_argument("--seeds", default=None,
                 help="comma-separated config.seed values (default 0,1; --matrix: 0,1,2)")
  p.add_argument("--variants", default=None,
                 help=f"comma-separated, of {sorted(VARIANTS)} (default "
                      f"{','.join(DEFAULT_VARIANTS)}; --matrix: {','.join(MATRIX_VARIANTS)})")
  p.add_argument("--sweep-steps", type=int, default=30, help="--matrix: steps of a sweep run")
  p.add_argument("--sweep-lrs", default="3e-5,1e-4,3e-4",
                 help="--matrix: comma-separated learning rates of the sweep")
  p.add_argument("--eval-every", type=int, default=None,
                 help="steps between held-out evaluations (0 = none; default: config's)")
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
  defaults = ((MATRIX_CONFIG, 120, "0,1,2", MATRIX_VARIANTS) if args.matrix else
              (DEFAULT_CONFIG, 40, "0,1", DEFAULT_VARIANTS))
  for field, default in zip(("config", "steps", "seeds", "variants"), defaults, strict=True):
    if getattr(args, field) is None:
      setattr(args, field, ",".join(default) if field == "variants" else default)
  if args.steps < 1 or args.sweep_steps < 1:
    p.error(f"--steps={args.steps} / --sweep-steps={args.sweep_steps}: expected >= 1")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.sweep_lrs = sorted({float(x) for x in args.sweep_lrs.split(",") if x.strip()})
  except ValueError:
    p.error(f"--seeds={args.seeds!r} / --sweep-lrs={args.sweep_lrs!r}: expected "
            "comma-separated ints / numbers")
  if not args.sweep_lrs or min(args.sweep_lrs) <= 0:
    p.error(f"--sweep-lrs={args.sweep_lrs}: expected at least one, all > 0")
  args.root = os.path.abspath(args.root)  # the runs start in the repository root
  args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
  bad = [v for v in args.variants if v not in VARIANTS]
  if bad or not args.variants or not args.seeds:
    p.error(f"--variants {args.variants} / --seeds {args.seeds}: expected at least one of "
            f"each, variants among {sorted(VARIANTS)}")
  return args, extra


def plan(args: argparse.Namespace, extra: Sequence[str]) -> Planned:
  """(label, workdir, tpu_run argv) of every run, variants outermost."""
  out = []
  for variant in args.variants:
    for seed in args.seeds:
      workdir = run_dir(args.root, variant, seed)
      out.append((f"{variant}/seed{seed}", workdir,
                  run_args(args.config, variant, seed, args.steps, workdir, args, extra)))
  return out


def lr_arg(lr: float | None) -> str:
  """The learning-rate override of a run; `<chosen>` while the sweep has not chosen (dry run)."""
  return f"--config.rl.learning_rate={'<chosen>' if lr is None else repr(lr)}"


def sweep_plan(args: argparse.Namespace, extra: Sequence[str]) -> Planned:
  """The sweep's runs, smallest lr first: Fixed-env GRPO, seed 0, --sweep-steps steps, no
  held-out evaluation."""
  out = []
  for lr in args.sweep_lrs:
    workdir = run_dir(os.path.join(args.root, "sweep"), f"lr{lr:g}", 0)
    out.append((f"sweep/lr{lr:g}", workdir, [
        "--config", args.config, "--workdir", workdir, "--config.seed=0",
        f"--config.train.num_steps={args.sweep_steps}", *VARIANTS["grpo"],
        "--config.eval.every=0", lr_arg(lr), *extra]))
  return out


def sweep_score(run: learning_report.Run) -> float | None:
  """Mean SWEEP_METRIC over the run's last SWEEP_LAST logged steps (None: never written)."""
  series = run.get(SWEEP_METRIC)
  if not series:
    return None
  return float(np.mean([series[step] for step in sorted(series)[-SWEEP_LAST:]]))


def choose_lr(scores: dict[float, float]) -> float:
  """The lr with the highest score; a tie goes to the smaller lr (max keeps the first)."""
  return max(sorted(scores), key=scores.__getitem__)


def read_choice(root: str, lrs: list[float]) -> dict | None:
  """ROOT/sweep/choice.json if it was made from the same lrs, else None."""
  path = os.path.join(root, "sweep", CHOICE)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      choice = json.load(f)
    return choice if choice["lrs"] == lrs and choice["chosen"] in lrs else None
  except (ValueError, KeyError, TypeError) as err:
    raise MatrixError(f"{path}: not a sweep choice ({err!r}); remove it") from None


def write_choice(root: str, lrs: list[float], sweep: Planned) -> dict:
  """Scores the finished sweep runs (sweep_score), chooses the lr, writes ROOT/sweep/choice.json."""
  scores = []
  for label, workdir, _ in sweep:
    score = sweep_score(learning_report.read_run(os.path.join(workdir, "tb")))
    if score is None:
      raise MatrixError(f"{label}: no {SWEEP_METRIC} in {workdir}/tb to choose by")
    scores.append(score)
  choice = {"lrs": lrs, "scores": scores, "chosen": choose_lr(dict(zip(lrs, scores, strict=True))),
            "metric": f"mean {SWEEP_METRIC} over the last {SWEEP_LAST} logged steps"}
  with open(os.path.join(root, "sweep", CHOICE), "w", encoding="utf-8") as f:
    json.dump(choice, f, indent=1)
  print(f"sweep: lr {choice['chosen']!r} chosen, {choice['metric']} {scores}", flush=True)
  return choice


def baseline_argv(config: ConfigDict, out: str) -> list[str]:
  """`python -m proj.starter eval`'s arguments (after `python`): the starting checkpoint's
  held-out records, sampled as the runs' evaluation samples (`config`: the runs' config)."""
  ev = config.eval
  temperature = [] if ev.temperature is None else ["--temperature", str(ev.temperature)]
  return ["-m", "proj.starter", "eval", "--checkpoint", config.model.checkpoint,
          "--tokenizer", config.tokenizer, "--suite", matrix_criteria.SUITE, *temperature,
          "--max-new-tokens", str(ev.max_new_tokens), "--samples", str(ev.samples),
          "--seed", "0", "--quiet", "--out", out]


def _count_lines(path: str) -> int:
  if not os.path.exists(path):
    return 0
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f if line.strip())


def run_baseline(argv: list[str], root: str, launcher: Launcher) -> str:
  """Writes ROOT/baseline.jsonl unless it holds every held-out item; 'skipped', 'done' or
  'failed' (its log: ROOT/baseline/launch.log)."""
  path, want = os.path.join(root, matrix_criteria.BASELINE), matrix_criteria.HELDOUT_ITEMS
  if _count_lines(path) == want:
    print(f"baseline: {path} holds {want} records, skipped", flush=True)
    return "skipped"
  print(f"baseline: evaluating the starting checkpoint into {path}", flush=True)
  rc = launcher(argv, os.path.join(root, "baseline"), "baseline")
  if rc == 0 and _count_lines(path) == want:
    return "done"
  print(f"baseline: failed (exit {rc}, {_count_lines(path)} of {want} records); see "
        f"{os.path.join(root, 'baseline', LOG)}", flush=True)
  return "failed"


def print_matrix(args: argparse.Namespace, sweep: Planned, choice: dict | None,
                 base: list[str], runs: Planned) -> None:
  """The matrix's commands in order (a line starting with # for what runs in the driver)."""
  if choice:
    print(f"# {args.root}/sweep/{CHOICE}: lr {choice['chosen']!r} (reused, no sweep)")
  else:
    for _, _, argv in sweep:
      print(shlex.join(["python", "launch/tpu_run.py", *argv]))
    print(f"# choose the lr: best mean {SWEEP_METRIC} over the last {SWEEP_LAST} steps "
          f"-> {args.root}/sweep/{CHOICE}")
  print(shlex.join(["python", *base]))
  for _, _, argv in runs:
    print(shlex.join(["python", "launch/tpu_run.py", *argv]))
  if not args.no_report:
    scripts = "python proj/starter/scripts"
    print(f"{scripts}/learning_report.py --root {shlex.quote(args.root)}")
    print(f"{scripts}/matrix_criteria.py --root {shlex.quote(args.root)} "
          f"--seeds {','.join(map(str, args.seeds))}")


def run_matrix(args: argparse.Namespace, extra: Sequence[str], launcher: Launcher) -> int:
  """The matrix mode: sweep, choice, baseline, runs with the chosen lr, report, criteria."""
  sweep = sweep_plan(args, extra)
  choice = read_choice(args.root, args.sweep_lrs)
  probe = plan(args, [lr_arg(args.sweep_lrs[0]), *extra])  # the runs as they will run, but lr
  config = check_args(probe[0][2], probe[0][0], validate=not args.dry_run)
  base = baseline_argv(config, os.path.join(args.root, matrix_criteria.BASELINE))
  if args.dry_run:
    print_matrix(args, sweep, choice, base, plan(args, [lr_arg(choice and choice["chosen"]),
                                                         *extra]))
    return 0
  for label, _, argv in (*sweep, *probe):  # every command checked before any starts
    check_args(argv, label)
  for label, workdir, argv in sweep if choice is None else ():
    same_command(argv, workdir, label)
  start, outcome = time.monotonic(), {}
  if choice is None:
    outcome.update({label: run_one(argv, workdir, label, launcher)
                    for label, workdir, argv in sweep})
    if "failed" in outcome.values():  # the runs need the sweep's lr
      return finish(args, outcome, start, report=False)
    choice = write_choice(args.root, args.sweep_lrs, sweep)
  runs = plan(args, [lr_arg(choice["chosen"]), *extra])
  for label, workdir, argv in runs:
    same_command(argv, workdir, label)
  outcome["baseline"] = run_baseline(base, args.root, launcher)
  outcome.update({label: run_one(argv, workdir, label, launcher)
                  for label, workdir, argv in runs})
  return finish(args, outcome, start, lr=choice["chosen"])


def finish(args: argparse.Namespace, outcome: dict[str, str], start: float,
           report: bool = True, **more) -> int:
  """The driver's JSON line, then the report (and in matrix mode the criteria); 1 if anything
  failed."""
  print(json.dumps({"driver": "learning_runs", "root": args.root, **more, "runs": outcome,
                    "wall_s": round(time.monotonic() - start, 1)}), flush=True)
  rcs = [0]
  if report and not args.no_report:
    rcs.append(learning_report.main(["--root", args.root]))
    if args.matrix:
      rcs.append(matrix_criteria.main(["--root", args.root,
                                       "--seeds", ",".join(map(str, args.seeds))]))
  return 1 if "failed" in outcome.values() or any(rcs) else 0


def main(argv: Sequence[str] | None = None, launcher: Launcher = subprocess_launcher) -> int:
  args, extra = parse(sys.argv[1:] if argv is None else argv)
  try:
    args.config = resolve_config(args.config)
    if args.matrix:
      return run_matrix(args, extra, launcher)
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
  return finish(args, outcome, start)


def _exit_on_sigterm(signum, frame) -> None:
  sys.exit(128 + signum)  # unwinds, so the run's record gets its launch's wall time


if __name__ == "__main__":
  signal.signal(signal.SIGTERM, _exit_on_sigterm)
  sys.exit(main())
