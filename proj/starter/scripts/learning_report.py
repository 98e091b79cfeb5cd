r"""The learning matrix's report: one figure, one markdown table, one JSON summary line.

    python proj/starter/scripts/learning_report.py --root runs/learning \
        [--png docs/learning.png] [--md FILE]

Reads the TensorBoard events of every ROOT/<variant>/seed<N>/tb (written by learning_runs.py;
any run of launch/tpu_run.py laid out so works) with tensorboard's event-file reader (no
TensorFlow). Each launch of a run writes its own event file (a resumed run appends one); the
value written last for a step wins. NaN values (e.g. the designer reward of a step with no
designer sample) count as not written, and a variant that never wrote a tag (Fixed-env GRPO has
no designer) is left out of that panel and shows "n/a" in the table.

Figure (default ROOT/learning.png): one panel per entry of PANELS, each variant a line, the
mean over its seeds, with the seeds' range shaded. Table (default ROOT/learning.md), one row a
variant, each cell the mean over seeds with the seeds' range in brackets:
* valid rate: of the last generation / mean over the generations;
* regret of valid designs: mean over steps of designer/regret_valid_mean;
* learnable share: mean of the 16-step window values (curriculum/learnable_share);
* held-out return: eval/seed_games_heldout/return (and with the hint) at the last evaluation;
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
import sys
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

Series = dict[int, float]  # step -> value
Run = dict[str, Series]  # tag -> series

# (panel title, tags: the first one a run wrote is used)
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("valid rate", ("curriculum/valid_rate",)),
    ("learnable share (16 steps)", ("curriculum/learnable_share",)),
    ("mean regret", ("curriculum/regret_mean",)),
    ("designer reward", ("designer/reward_mean",)),
    ("Vendi / n", ("curriculum/diversity_vendi_per_n", "curriculum/diversity_vendi")),
    ("memory size", ("curriculum/memory_size",)),
    ("held-out seed-game return", ("eval/seed_games_heldout/return",)),
    ("wall time per step (s)", ("time/step_s",)),
)
HELDOUT = "eval/seed_games_heldout/return"
HELDOUT_HINT = "eval/seed_games_heldout/return_with_hint"
TIMES = ("step_s", "generate_s", "sandbox_s", "train_s")
LAUNCH_TAG = "launch/first_step"  # derived here, not written by the run
RUN_RECORD = "learning_run.json"  # learning_runs.py's record of a run's launches


def read_run(tb_dir: str) -> Run:
  """Every scalar tag of one run's event files: tag -> {step: value}, NaNs left out, files in
  name (= launch) order, the value written last for a step winning. LAUNCH_TAG holds the
  first step of each launch (each event file), which includes the launch's compilation."""
  run: Run = {}
  for path in sorted(glob.glob(os.path.join(tb_dir, "*tfevents*"))):
    first = None
    for event in event_file_loader.EventFileLoader(path).Load():
      for value in event.summary.value:
        array = tensor_util.make_ndarray(value.tensor) if value.HasField("tensor") else None
        if array is None or array.ndim != 0 or array.dtype.kind != "f":
          continue  # text summaries
        first = event.step if first is None else first
        series = run.setdefault(value.tag, {})
        series.pop(int(event.step), None)
        if math.isfinite(float(array)):
          series[int(event.step)] = float(array)
    if first is not None:
      run.setdefault(LAUNCH_TAG, {})[int(first)] = 1.0
  return {tag: series for tag, series in run.items() if series}


def collect(root: str) -> dict[str, dict[int, Run]]:
  """variant -> seed -> run, from ROOT/<variant>/seed<N>/tb (variants in name order)."""
  out: dict[str, dict[int, Run]] = {}
  for tb in sorted(glob.glob(os.path.join(root, "*", "seed*", "tb"))):
    seed_dir = os.path.dirname(tb)
    variant, seed = os.path.basename(os.path.dirname(seed_dir)), os.path.basename(seed_dir)[4:]
    if seed.isdigit():
      out.setdefault(variant, {})[int(seed)] = read_run(tb)
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


def draw(data: dict[str, dict[int, Run]], png: str | None = None) -> Figure:
  """The report figure (saved to `png` when given); one axes per PANELS entry, in order."""
  cols = 4
  rows = math.ceil(len(PANELS) / cols)
  fig = Figure(figsize=(4.2 * cols, 3.2 * rows), layout="constrained")
  axes = fig.subplots(rows, cols, squeeze=False).ravel()
  colors = {v: f"C{i}" for i, v in enumerate(data)}
  for ax, (title, tags) in zip(axes, PANELS, strict=False):
    ax.set_title(title)
    ax.set_xlabel("step")
    plotted = False
    for variant, runs in data.items():
      tag = pick_tag(runs, tags)
      if tag is None:
        continue
      steps, mean, low, high = band(runs, tag)
      ax.plot(steps, mean, marker="o" if len(steps) < 12 else None, color=colors[variant],
              label=f"{variant} ({len(runs)} seeds)")
      ax.fill_between(steps, low, high, color=colors[variant], alpha=0.2, linewidth=0)
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


def summarize(data: dict[str, dict[int, Run]]) -> dict[str, dict]:
  """variant -> {field: {mean, min, max} over seeds, or None where no seed wrote it}."""
  out = {}
  for variant, runs in data.items():
    row = {"seeds": sorted(runs),
           "steps": max((max(r["time/step_s"]) for r in runs.values() if r.get("time/step_s")),
                        default=0),
           "valid_rate_final": _per_seed(runs, "curriculum/valid_rate", _last),
           "valid_rate_mean": _per_seed(runs, "curriculum/valid_rate", _mean),
           "regret_valid_designs": _per_seed(runs, "designer/regret_valid_mean", _mean),
           "regret_mean": _per_seed(runs, "curriculum/regret_mean", _mean),
           "learnable_share": _per_seed(runs, "curriculum/learnable_share", _mean),
           "heldout_return": _per_seed(runs, HELDOUT, _last),
           "heldout_return_hint": _per_seed(runs, HELDOUT_HINT, _last)}
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
  data = collect(args.root)
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
