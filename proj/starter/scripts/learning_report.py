r"""The learning matrix's report: one figure, one markdown table, one JSON summary line.

    python proj/starter/scripts/learning_report.py --root runs/learning \
        [--png docs/learning.png] [--md FILE]

Reads the TensorBoard events of every ROOT/<variant>/seed<N>/tb (written by learning_runs.py;
any run of launch/tpu_run.py laid out so works) with tensorboard's event-file reader (no
TensorFlow). Each launch of a run writes its own event file (a resumed run appends one); the
value written last for a step wins. NaN values (e.g. the designer reward of a step with no
designer sample) count as not written, and a variant that never wrote a tag (Fixed-env GRPO has
no designer) is left out of that panel and shows "n/a" in the table.

Figure (default ROOT/learning.png): one panel per entry of PANELS (issue 49 point 6: the
agent's training return, its hint arm dashed; the held-out return; valid rate; regret of valid
designs; designer reward; the share of designs whose hint matters; memory size; Vendi / n; wall
time per step), each variant a line, the mean over its seeds, with the seeds' range shaded. The
share is derived here (SHARE_TAG) from each run's curriculum.jsonl with matrix_criteria.py's
definition (a design counted once, in the refresh it first appeared, its hint matters iff its
regret over that refresh is at least matrix_criteria.MATTERS), one point a refresh at its first
step. The held-out return is that of the first of HELDOUT_SUITES a variant's runs wrote.
Table (default ROOT/learning.md), one row a variant, each cell the mean over seeds with the
seeds' range in brackets:
* valid rate: of the last generation / mean over the generations;
* regret of valid designs: mean over steps of designer/regret_valid_mean;
* learnable share: mean of the 16-step window values (curriculum/learnable_share);
* held-out return: eval/<suite>/return (and with the hint) at the last evaluation, the suite
  the first of HELDOUT_SUITES the variant's runs wrote (`heldout_suite` in the JSON line);
* wall time per step with its generate / sandbox / train split: mean of time/* over the steps
  that were not the first of a launch (those compile), all steps when none is left;
* run wall time: all launches of the run, from learning_runs.py's learning_run.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pathlib
import sys
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import matrix_criteria  # noqa: E402
from tb_runs import LAUNCH_TAG, Run, Series, read_run  # noqa: E402

HELDOUT_SUITES = ("minigames_heldout", "seed_games_heldout")  # the first one written is shown
SHARE_TAG = "derived/hint_matters_share"  # derived here from curriculum.jsonl, not written
# (panel title, tags: the first one a run wrote is used, a tag drawn dashed beside it)
PANELS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("training return (dashed: hint)", ("agent/return_no_hint",), "agent/return_hint"),
    ("held-out return", tuple(f"eval/{s}/return" for s in HELDOUT_SUITES), None),
    ("valid rate", ("curriculum/valid_rate",), None),
    ("regret of valid designs", ("designer/regret_valid_mean",), None),
    ("designer reward", ("designer/reward_mean",), None),
    ("share of designs whose hint matters", (SHARE_TAG,), None),
    ("memory size", ("curriculum/memory_size",), None),
    ("Vendi / n", ("curriculum/diversity_vendi_per_n", "curriculum/diversity_vendi"), None),
    ("wall time per step (s)", ("time/step_s",), None),
)
TIMES = ("step_s", "generate_s", "sandbox_s", "train_s")
RUN_RECORD = matrix_criteria.RUN_RECORD  # learning_runs.py's record of a run's launches


def hint_matters_share(workdir: str) -> Series:
  """The share of each refresh's designs whose hint matters (matrix_criteria's definition),
  at the refresh's first step; empty without a curriculum log."""
  try:
    designs, _ = matrix_criteria.run_designs(workdir)
  except matrix_criteria.Missing:
    return {}
  k = matrix_criteria.refresh_k(workdir)
  return {r * k + 1: s for r, s in matrix_criteria.shares_by_refresh(designs.values()).items()}


def collect(root: str) -> dict[str, dict[int, Run]]:
  """variant -> seed -> run, from ROOT/<variant>/seed<N>/tb (variants in name order), with
  SHARE_TAG from the run's curriculum log where it has designs."""
  out: dict[str, dict[int, Run]] = {}
  for tb in sorted(glob.glob(os.path.join(root, "*", "seed*", "tb"))):
    seed_dir = os.path.dirname(tb)
    variant, seed = os.path.basename(os.path.dirname(seed_dir)), os.path.basename(seed_dir)[4:]
    if seed.isdigit():
      run = read_run(tb)
      share = hint_matters_share(seed_dir)
      out.setdefault(variant, {})[int(seed)] = {**run, SHARE_TAG: share} if share else run
  return out


def pick_tag(runs: dict[int, Run], tags: Sequence[str]) -> str | None:
  """The first of `tags` that any of the runs wrote."""
  return next((t for t in tags if any(run.get(t) for run in runs.values())), None)


def band(runs: dict[int, Run], tag: str) -> tuple[np.ndarray, ...]:
  """(steps, mean, low, high) over the seeds that wrote `tag` at each step."""
  steps = sorted({s for run in runs.values() for s in run.get(tag, {})})
  values = [[run[tag][s] for run in runs.values() if s in run.get(tag, {})] for s in steps]
  return (np.array(steps), np.array([np.mean(v) for v in values]),
          np.array([min(v) for v in values]), np.array([max(v) for v in values]))


def plot_band(ax: Axes, runs: dict[int, Run], tag: str, color: str, label: str,
              style: str = "-") -> None:
  """One variant's line (mean over seeds) with the seeds' range shaded."""
  steps, mean, low, high = band(runs, tag)
  ax.plot(steps, mean, style, marker="o" if len(steps) < 12 else None, color=color, label=label)
  ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)


def draw(data: dict[str, dict[int, Run]], png: str | None = None) -> Figure:
  """The report figure (saved to `png` when given); one axes per PANELS entry, in order."""
  cols = 3
  rows = math.ceil(len(PANELS) / cols)
  fig = Figure(figsize=(4.6 * cols, 3.2 * rows), layout="constrained")
  axes = fig.subplots(rows, cols, squeeze=False).ravel()
  colors = {v: f"C{i}" for i, v in enumerate(data)}
  for ax, (title, tags, dashed) in zip(axes, PANELS, strict=False):
    ax.set_title(title)
    ax.set_xlabel("step")
    plotted = False
    for variant, runs in data.items():
      tag = pick_tag(runs, tags)
      if tag is None:
        continue
      plot_band(ax, runs, tag, colors[variant], f"{variant} ({len(runs)} seeds)")
      if dashed and pick_tag(runs, (dashed,)):
        plot_band(ax, runs, dashed, colors[variant], f"{variant}, hint", "--")
      plotted = True
    if plotted:
      ax.legend(fontsize="small")
    else:
      ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
  for ax in axes[len(PANELS):]:
    ax.set_axis_off()
  if png:
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=110)
  return fig


def _over_seeds(values: list[float]) -> dict[str, float] | None:
  if not values:
    return None
  return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values))}


def _per_seed(runs: dict[int, Run], tag: str, reduce) -> dict[str, float] | None:
  return _over_seeds([reduce(run[tag]) for run in runs.values() if run.get(tag)])


def _last(series: Series) -> float:
  return series[max(series)]


def _mean(series: Series) -> float:
  return float(np.mean(list(series.values())))


def _time_per_step(run: Run, tag: str) -> float | None:
  """Mean over the steps that were not the first of a launch (those compile); over all
  steps when every step was."""
  series = run.get(tag)
  if not series:
    return None
  later = [v for s, v in series.items() if s not in run.get(LAUNCH_TAG, {})]
  return float(np.mean(later or list(series.values())))


def heldout_suite(runs: dict[int, Run]) -> str:
  """The first of HELDOUT_SUITES whose return the runs wrote (the first when none did)."""
  return next((s for s in HELDOUT_SUITES if pick_tag(runs, (f"eval/{s}/return",))),
              HELDOUT_SUITES[0])


def summarize(data: dict[str, dict[int, Run]]) -> dict[str, dict]:
  """variant -> {field: {mean, min, max} over seeds, or None where no seed wrote it}."""
  out = {}
  for variant, runs in data.items():
    suite = heldout_suite(runs)
    row = {"seeds": sorted(runs), "heldout_suite": suite,
           "steps": max((max(r["time/step_s"]) for r in runs.values() if r.get("time/step_s")),
                        default=0),
           "valid_rate_final": _per_seed(runs, "curriculum/valid_rate", _last),
           "valid_rate_mean": _per_seed(runs, "curriculum/valid_rate", _mean),
           "regret_valid_designs": _per_seed(runs, "designer/regret_valid_mean", _mean),
           "regret_mean": _per_seed(runs, "curriculum/regret_mean", _mean),
           "learnable_share": _per_seed(runs, "curriculum/learnable_share", _mean),
           "heldout_return": _per_seed(runs, f"eval/{suite}/return", _last),
           "heldout_return_hint": _per_seed(runs, f"eval/{suite}/return_with_hint", _last)}
    for t in TIMES:
      row[t] = _over_seeds([v for v in (_time_per_step(run, f"time/{t}") for run in runs.values())
                            if v is not None])
    out[variant] = row
  return out


def run_walls(root: str, summary: dict[str, dict]) -> None:
  """Adds each variant's `run_wall_s` (all launches of a run, over seeds) from the driver's
  records; None where no record has a finished launch."""
  for variant, row in summary.items():
    walls = []
    for seed in row["seeds"]:
      path = os.path.join(root, variant, f"seed{seed}", RUN_RECORD)
      if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
          launches = json.load(f)["launches"]
        walls += [sum(lc["wall_s"] or 0.0 for lc in launches)] if launches else []
    row["run_wall_s"] = _over_seeds(walls)


def cell(stat: dict[str, float] | None, fmt: str = ".3f") -> str:
  if stat is None:
    return "n/a"
  if stat["min"] == stat["max"]:
    return format(stat["mean"], fmt)
  return f"{stat['mean']:{fmt}} [{stat['min']:{fmt}}, {stat['max']:{fmt}}]"


COLUMNS = (  # (header, field, format)
    ("valid rate, final", "valid_rate_final", ".3f"),
    ("valid rate, mean", "valid_rate_mean", ".3f"),
    ("regret of valid designs", "regret_valid_designs", "+.3f"),
    ("mean regret (all envs)", "regret_mean", "+.3f"),
    ("learnable share (16 steps)", "learnable_share", ".3f"),
    ("held-out return", "heldout_return", ".3f"),
    ("held-out return, hint", "heldout_return_hint", ".3f"),
    ("s / step", "step_s", ".1f"),
    ("generate s", "generate_s", ".1f"),
    ("sandbox s", "sandbox_s", ".1f"),
    ("train s", "train_s", ".1f"),
    ("run wall s", "run_wall_s", ".0f"),
)


def markdown_table(summary: dict[str, dict]) -> str:
  """One row a variant; cells are the mean over seeds [min, max]."""
  lines = ["| variant | seeds | steps | " + " | ".join(h for h, _, _ in COLUMNS) + " |",
           "| --- " * (len(COLUMNS) + 3) + "|"]
  for variant, row in summary.items():
    cells = [variant, ",".join(map(str, row["seeds"])), str(row["steps"])]
    cells += [cell(row[field], fmt) for _, field, fmt in COLUMNS]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python proj/starter/scripts/learning_report.py",
                              description=__doc__.split("\n\n")[0])
  p.add_argument("--root", required=True, help="the driver's --root")
  p.add_argument("--png", help="figure path (default ROOT/learning.png)")
  p.add_argument("--md", help="markdown table path (default ROOT/learning.md)")
  args = p.parse_args(argv)
  try:
    data = collect(args.root)
  except matrix_criteria.CriteriaError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  if not data:
    print(f"error: no event files under {args.root}/<variant>/seed<N>/tb", file=sys.stderr)
    return 2
  png = args.png or os.path.join(args.root, "learning.png")
  md = args.md or os.path.join(args.root, "learning.md")
  draw(data, png)
  summary = summarize(data)
  run_walls(args.root, summary)
  with open(md, "w", encoding="utf-8") as f:
    f.write(markdown_table(summary))
  print(json.dumps({"report": "learning", "root": args.root, "png": png, "md": md,
                    "variants": summary}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
