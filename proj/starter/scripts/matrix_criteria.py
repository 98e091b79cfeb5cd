r"""Issue 49's pre-registered criteria of the learning matrix, computed from its root.

    python proj/starter/scripts/matrix_criteria.py --root runs/matrix [--seeds 0,1,2]

Reads what `learning_runs.py --matrix` leaves under ROOT: ROOT/baseline.jsonl (the starting
checkpoint's held-out records) and, in each ROOT/<variant>/seed<N>, learning_run.json (the
driver's record: finished or not, each launch's wall time), eval/step_<N>.jsonl (the held-out
records of each evaluation), curriculum.jsonl, config.json and tb/. Prints one JSON line and
writes ROOT/criteria.md.

Pre-registration (fixed before the matrix runs; the constants below hold its numbers):
- Items of the category: the held-out items whose game family is `locate` or `peek`
  (constant `FAMILIES = ("locate", "peek")`, 80 items). An item's no-hint return:
  arm_mean(record, "no_hint").
- **P1** per run (variants spade and grpo, each seed): paired differences d_i = final_i −
  baseline_i over the category's items, final = the run's last `eval/step_N.jsonl` (largest
  N); gain = mean(d), se = std(d, ddof=1)/sqrt(n). Passes for a run iff gain ≥ 0.10 and
  gain ≥ 3·se. P1 passes iff every seed of spade and of grpo passes. Also report the
  all-family gain (forgetting check) per run, not a criterion.
- **P2** per spade / spade_frozen run: designs = envs with origin "designed" in
  curriculum.jsonl, each uid counted once, in the refresh (= first step it appears, steps
  1-based, refresh index (step-1)//k with k read from the run's `config.json` selfplay.k,
  default 2) in which it first appeared, its regret = mean of all its "hint" returns − mean
  of its "no_hint" returns over the steps of that first window (consecutive steps of that
  refresh); "hint matters" iff regret ≥ 0.25 (constant MATTERS = 0.25). share(refreshes) =
  designs that matter / designs, over the refreshes' designs pooled. rise = share(last 10
  refreshes) − share(first 10 refreshes). P2 passes iff every spade seed has rise ≥ 0.25,
  and in ≥ 2 of 3 seed pairs (spade seed s vs spade_frozen seed s) rise_spade − rise_frozen
  ≥ 0.15. Report the numbers of designs behind each share.
- **P3** (reported, no pass/fail): per seed s, Δ_s = spade final category return − grpo
  final category return (means over the 80 items); mean and a 90 % t-interval over seeds.
  Also at matched wall time: W = grpo's time in steps (the sum of its TB `time/step_s`
  series); spade's held-out category return at its last evaluation step N whose time in
  steps (the sum of its `time/step_s` over steps ≤ N) is ≤ W, minus grpo's final one, and the
  same interval. Both sides count step time only (evaluations and compiles between launches
  left out of both).
- Missing data (a run not finished, no records) gives "n/a" with the reason, never a crash;
  bad files one line `error: ...` and exit 2.

How the rules meet partial data: a value needs a finished run (its record says done); an item
unscored in either arm (arm_mean None) is left out of the pairs and means, a design without
returns in both arms out of the shares, and the first and last refreshes are those of the
run's last logged step. A criterion fails as soon as the runs that have data can no longer
meet it, passes when they do, and is "n/a" otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pathlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import stats

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from tb_runs import read_run  # noqa: E402

from proj.starter import gates, heldout  # noqa: E402
from spade_jax.eval.suite import ItemRecord  # noqa: E402
from spade_jax.eval.suites.seed_games import arm_mean  # noqa: E402
from spade_jax.metrics import env_log  # noqa: E402

FAMILIES = ("locate", "peek")
SUITE = "minigames_heldout"
HELDOUT_ITEMS = heldout.INSTANCES * len(heldout.FAMILIES) * len(heldout.RESET_SEEDS)  # 280
BASELINE = "baseline.jsonl"
RUN_RECORD = "learning_run.json"  # learning_runs.py's record of a run's launches
SEEDS = (0, 1, 2)
MIN_GAIN = 0.10  # P1
MIN_Z = 3.0  # P1: gain >= MIN_Z standard errors
MATTERS = 0.25  # P2: a design's hint matters iff its regret >= MATTERS
WINDOW = 10  # P2: refreshes at each end of a run
MIN_RISE = 0.25  # P2: every spade seed
MIN_RISE_OVER_FROZEN = 0.15  # P2: rise_spade - rise_frozen, in >= MIN_PAIRS seed pairs
MIN_PAIRS = 2
CONFIDENCE = 0.90  # P3's t-interval
DEFAULT_K = 2

Returns = dict[str, float]  # item id -> no-hint return


class CriteriaError(Exception):
  """A file that cannot be read: one line `error: ...`, exit 2."""


class Missing(Exception):
  """Data not there (a run not finished, no records): the value is "n/a" with this reason."""


class Design(NamedTuple):
  """A design, in the refresh where it first appeared, with its regret over that refresh."""

  refresh: int
  regret: float


def game_families() -> dict[str, str]:
  """Game uid -> family of every `minigames_heldout` game."""
  return {uid: game.family
          for uid, game in heldout.split_games(heldout.SPLIT_SEEDS[SUITE]).items()}


def no_hint_returns(records: Iterable[ItemRecord], families: Mapping[str, str],
                    keep: Sequence[str] | None = FAMILIES) -> Returns:
  """Item id -> no-hint return of the items whose game's family is in `keep` (all items when
  None); unscored items left out."""
  out = {}
  for r in records:
    value = arm_mean(r, "no_hint")
    if value is not None and (keep is None or families.get(r.id.rsplit("/", 1)[0]) in keep):
      out[r.id] = value
  return out


def paired_gain(final: Returns, baseline: Returns) -> dict[str, float]:
  """Mean and standard error of final - baseline over the items scored in both."""
  ids = sorted(final.keys() & baseline.keys())
  if len(ids) < 2:
    raise Missing(f"{len(ids)} items scored in both the run and the baseline")
  d = np.array([final[i] - baseline[i] for i in ids])
  return {"gain": float(d.mean()), "se": float(d.std(ddof=1) / math.sqrt(len(d))),
          "n": len(d)}


def p1_passes(gain: Mapping[str, float]) -> bool:
  """A run's P1: the category gain is at least MIN_GAIN and MIN_Z standard errors."""
  return gain["gain"] >= MIN_GAIN and gain["gain"] >= MIN_Z * gain["se"]


def refresh_of(step: int, k: int) -> int:
  """The refresh index of a (1-based) step."""
  return (step - 1) // k


def design_regrets(steps: Sequence[Mapping[str, Any]], k: int) -> dict[str, Design]:
  """Each design (origin "designed") of the curriculum log's step lines, once, in the refresh
  of its first step, its regret the mean hint return minus the mean no-hint return over that
  refresh's steps; designs without returns in both arms left out."""
  first: dict[str, int] = {}
  arms: dict[str, dict[str, list[float]]] = {}
  for line in steps:
    step = int(line["step"])
    for env in line["envs"]:
      if env["origin"] != "designed":
        continue
      start = first.setdefault(env["uid"], step)
      if refresh_of(step, k) == refresh_of(start, k):
        pooled = arms.setdefault(env["uid"], {"hint": [], "no_hint": []})
        for arm, values in pooled.items():
          values += [v for v in env["returns"].get(arm, []) if v is not None]
  return {uid: Design(refresh_of(first[uid], k), float(np.mean(a["hint"]) - np.mean(a["no_hint"])))
          for uid, a in arms.items() if a["hint"] and a["no_hint"]}


def share(designs: Iterable[Design]) -> dict[str, Any]:
  """The share of `designs` whose hint matters (None when there are none), with the counts."""
  regrets = [d.regret for d in designs]
  matters = sum(r >= MATTERS for r in regrets)
  return {"share": matters / len(regrets) if regrets else None, "matters": matters,
          "designs": len(regrets)}


def shares_by_refresh(designs: Iterable[Design]) -> dict[int, float]:
  """Refresh index -> share of its designs whose hint matters (refreshes with designs)."""
  by_refresh: dict[int, list[Design]] = {}
  for d in designs:
    by_refresh.setdefault(d.refresh, []).append(d)
  return {r: share(ds)["share"] for r, ds in sorted(by_refresh.items())}


def rise(designs: Sequence[Design], last_refresh: int) -> dict[str, Any]:
  """share(last WINDOW refreshes) - share(first WINDOW refreshes), with both shares."""
  first = share(d for d in designs if d.refresh < WINDOW)
  last = share(d for d in designs if d.refresh > last_refresh - WINDOW)
  if not first["designs"] or not last["designs"]:
    raise Missing(f"no designs in the first or the last {WINDOW} refreshes")
  return {"rise": last["share"] - first["share"], "first": first, "last": last}


def t_interval(values: Sequence[float]) -> dict[str, Any]:
  """Mean and the CONFIDENCE t-interval of `values` (None with fewer than two)."""
  if not values:
    return {"mean": None, "ci90": None, "n": 0}
  mean = float(np.mean(values))
  if len(values) < 2:
    return {"mean": mean, "ci90": None, "n": 1}
  half = (stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1)
          * float(np.std(values, ddof=1)) / math.sqrt(len(values)))
  return {"mean": mean, "ci90": [mean - half, mean + half], "n": len(values)}


def verdict(oks: Sequence[bool | None], need: int | None = None) -> str:
  """'pass' when at least `need` (all when None) of `oks` are True, 'fail' when the unknown
  ones (None) can no longer make it, else 'n/a'."""
  need = len(oks) if need is None else need
  yes, unknown = sum(o is True for o in oks), sum(o is None for o in oks)
  return "pass" if yes >= need else "fail" if yes + unknown < need else "n/a"


def both(*verdicts: str) -> str:
  """'fail' if any fails, 'n/a' if any is unknown, else 'pass'."""
  return "fail" if "fail" in verdicts else "n/a" if "n/a" in verdicts else "pass"


def _json(path: str) -> Any:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError) as err:
    raise CriteriaError(f"{path}: {err}") from None


def finished(workdir: str) -> dict:
  """The run's record; Missing unless it says the run finished."""
  path = os.path.join(workdir, RUN_RECORD)
  if not os.path.exists(path):
    raise Missing(f"{workdir}: not started (no {RUN_RECORD})")
  record = _json(path)
  if not isinstance(record, dict) or "done" not in record:
    raise CriteriaError(f"{path}: not a learning_runs.py record")
  if not record["done"]:
    raise Missing(f"{workdir}: not finished")
  return record


def eval_files(workdir: str) -> dict[int, str]:
  """Step -> <workdir>/eval/step_<N>.jsonl; Missing when there is none."""
  out = {}
  for path in glob.glob(os.path.join(workdir, "eval", "step_*.jsonl")):
    match = re.fullmatch(r"step_(\d+)\.jsonl", os.path.basename(path))
    if match:
      out[int(match[1])] = path
  if not out:
    raise Missing(f"{workdir}: no eval/step_N.jsonl records")
  return dict(sorted(out.items()))


def records(path: str) -> list[ItemRecord]:
  try:
    return gates.read_records(path)
  except (OSError, gates.RecordsError) as err:
    raise CriteriaError(str(err)) from None


def run_designs(workdir: str) -> tuple[dict[str, Design], int]:
  """The run's designs (design_regrets) and the refresh index of its last logged step."""
  path = os.path.join(workdir, env_log.LOG_NAME)
  if not os.path.exists(path):
    raise Missing(f"{workdir}: no {env_log.LOG_NAME}")
  k = refresh_k(workdir)
  try:
    steps = env_log.read_steps(path)
    designs = design_regrets(steps, k)
  except (ValueError, KeyError, TypeError, AttributeError) as err:
    raise CriteriaError(f"{path}: not a curriculum log ({err!r})") from None
  if not steps:
    raise Missing(f"{path}: no steps")
  return designs, refresh_of(int(steps[-1]["step"]), k)


def refresh_k(workdir: str) -> int:
  """selfplay.k of the run's config.json (DEFAULT_K without one)."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return DEFAULT_K
  config = _json(path)
  k = config.get("selfplay", {}).get("k", DEFAULT_K) if isinstance(config, dict) else None
  if not isinstance(k, int) or k < 1:
    raise CriteriaError(f"{path}: selfplay.k={k!r}, expected an int >= 1")
  return k


def step_times(workdir: str) -> dict[int, float]:
  """The run's TensorBoard time/step_s series; Missing when it wrote none."""
  series = read_run(os.path.join(workdir, "tb")).get("time/step_s")
  if not series:
    raise Missing(f"{workdir}: no time/step_s in tb/")
  return series


def n_a(fn: Callable[..., dict], *args: Any) -> dict:
  """fn(*args), or {"n/a": reason} when data is missing."""
  try:
    return fn(*args)
  except Missing as why:
    return {"n/a": str(why)}


def _workdir(root: str, variant: str, seed: int) -> str:
  return os.path.join(root, variant, f"seed{seed}")


def p1_run(workdir: str, baseline: list[ItemRecord] | None,
           families: Mapping[str, str]) -> dict:
  """One run's P1 numbers: category gain over the baseline (None: not there), its verdict,
  the all-family gain."""
  if baseline is None:
    raise Missing(f"no {BASELINE} beside the runs")
  finished(workdir)
  step, path = list(eval_files(workdir).items())[-1]
  final = records(path)
  gain = paired_gain(no_hint_returns(final, families), no_hint_returns(baseline, families))
  every = paired_gain(no_hint_returns(final, families, None),
                      no_hint_returns(baseline, families, None))
  return {"step": step, **gain, "passes": p1_passes(gain), "all_families": every}


def p1(root: str, seeds: Sequence[int], families: Mapping[str, str]) -> dict:
  """P1's verdict and each spade / grpo run's numbers."""
  path = os.path.join(root, BASELINE)
  baseline = records(path) if os.path.exists(path) else None
  runs = {f"{v}/seed{s}": n_a(p1_run, _workdir(root, v, s), baseline, families)
          for v in ("spade", "grpo") for s in seeds}
  return {"verdict": verdict([r.get("passes") for r in runs.values()]), "runs": runs}


def p2_run(workdir: str) -> dict:
  """One run's rise, with the shares and design counts behind it."""
  finished(workdir)
  designs, last = run_designs(workdir)
  return {**rise(list(designs.values()), last), "refreshes": last + 1}


def p2(root: str, seeds: Sequence[int]) -> dict:
  """P2's verdict, its two parts' verdicts, each seed's rise over frozen and each run's rise."""
  runs = {f"{v}/seed{s}": n_a(p2_run, _workdir(root, v, s))
          for v in ("spade", "spade_frozen") for s in seeds}
  rises = {s: (runs[f"spade/seed{s}"].get("rise"), runs[f"spade_frozen/seed{s}"].get("rise"))
           for s in seeds}
  pairs = {f"seed{s}": None if None in r else r[0] - r[1] for s, r in rises.items()}
  spade_ok = verdict([None if r[0] is None else r[0] >= MIN_RISE for r in rises.values()])
  pairs_ok = verdict([None if d is None else d >= MIN_RISE_OVER_FROZEN for d in pairs.values()],
                     min(MIN_PAIRS, len(seeds)))
  return {"verdict": both(spade_ok, pairs_ok), "spade_rise": spade_ok, "pairs": pairs_ok,
          "rise_over_frozen": pairs, "runs": runs}


def _category_mean(path: str, families: Mapping[str, str]) -> float:
  values = list(no_hint_returns(records(path), families).values())
  if not values:
    raise Missing(f"{path}: no scored category items")
  return float(np.mean(values))


def p3_seed(root: str, seed: int, families: Mapping[str, str]) -> dict:
  """Δ of the final category returns, and of spade's at grpo's wall time."""
  spade, grpo = _workdir(root, "spade", seed), _workdir(root, "grpo", seed)
  finished(spade)
  finished(grpo)
  budget = sum(step_times(grpo).values())
  spade_evals = eval_files(spade)
  grpo_final = _category_mean(list(eval_files(grpo).values())[-1], families)
  spade_final = _category_mean(list(spade_evals.values())[-1], families)
  return {"delta": spade_final - grpo_final, "grpo_wall_s": budget,  # of steps
          "matched": n_a(_matched, spade_evals, step_times(spade), budget, grpo_final, families)}


def _matched(evals: Mapping[int, str], times: Mapping[int, float], budget: float,
             grpo_final: float, families: Mapping[str, str]) -> dict:
  """spade's category return at its last evaluation within `budget` seconds of steps, minus
  grpo's final one."""
  wall = {n: sum(v for s, v in times.items() if s <= n) for n in evals}  # cumulative
  within = [n for n in evals if wall[n] <= budget]
  if not within:
    raise Missing("no spade evaluation within grpo's wall time")
  return {"step": within[-1], "wall_s": wall[within[-1]],
          "delta": _category_mean(evals[within[-1]], families) - grpo_final}


def p3(root: str, seeds: Sequence[int], families: Mapping[str, str]) -> dict:
  """P3: the seeds' Δ at the end and at matched wall time, each with its t-interval."""
  per_seed = {f"seed{s}": n_a(p3_seed, root, s, families) for s in seeds}
  return {"final": t_interval([r["delta"] for r in per_seed.values() if "delta" in r]),
          "matched_wall": t_interval([r["matched"]["delta"] for r in per_seed.values()
                                      if "delta" in r.get("matched", {})]),
          "per_seed": per_seed}


def criteria(root: str, seeds: Sequence[int], families: Mapping[str, str]) -> dict:
  """P1, P2 and P3 of the matrix under `root`."""
  return {"P1": p1(root, seeds, families), "P2": p2(root, seeds), "P3": p3(root, seeds, families)}


def _num(value: Any, fmt: str = "+.3f") -> str:
  return "n/a" if value is None else format(value, fmt)


def _share(s: Mapping[str, Any]) -> str:
  return f"{_num(s['share'], '.3f')} ({s['matters']}/{s['designs']})"


def _interval(stat: Mapping[str, Any]) -> str:
  ci = stat["ci90"]
  span = f", 90 % t-interval [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""
  return f"mean {_num(stat['mean'])} over {stat['n']} seeds{span}"


def _matched_text(m: Mapping[str, Any]) -> str:
  return (f"n/a: {m['n/a']}" if "n/a" in m else
          f"Δ {m['delta']:+.3f} (spade's step {m['step']}, {m['wall_s']:.0f} s of steps)")


def markdown(result: Mapping[str, Any]) -> str:
  """criteria.md: each criterion's verdict and the numbers behind it."""
  lines = [f"# Matrix criteria ({result['root']})", "",
           f"## P1: {result['P1']['verdict']}", "",
           "| run | step | n | gain | se | passes | all-family gain |", "| --- " * 7 + "|"]
  for label, r in result["P1"]["runs"].items():
    every = r.get("all_families", {})
    lines.append(f"| {label} | n/a: {r['n/a']} |" if "n/a" in r else
                 f"| {label} | {r['step']} | {r['n']} | {r['gain']:+.3f} | {r['se']:.3f} | "
                 f"{r['passes']} | {_num(every.get('gain'))} |")
  p2_ = result["P2"]
  lines += ["", f"## P2: {p2_['verdict']} (every spade rise: {p2_['spade_rise']}; "
            f"pairs over frozen: {p2_['pairs']})", "",
            "| run | refreshes | share, first 10 | share, last 10 | rise |", "| --- " * 5 + "|"]
  for label, r in p2_["runs"].items():
    lines.append(f"| {label} | n/a: {r['n/a']} |" if "n/a" in r else
                 f"| {label} | {r['refreshes']} | {_share(r['first'])} | {_share(r['last'])} | "
                 f"{r['rise']:+.3f} |")
  lines += ["", "rise_spade - rise_frozen: " + ", ".join(
      f"{s} {_num(d)}" for s, d in p2_["rise_over_frozen"].items()), "",
            "## P3 (reported)", "",
            f"- final, spade - grpo: {_interval(result['P3']['final'])}",
            f"- at grpo's wall time: {_interval(result['P3']['matched_wall'])}"]
  for seed, r in result["P3"]["per_seed"].items():
    lines.append(f"- {seed}: n/a: {r['n/a']}" if "n/a" in r else
                 f"- {seed}: Δ {r['delta']:+.3f}; at grpo's {r['grpo_wall_s']:.0f} s: "
                 + _matched_text(r["matched"]))
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python proj/starter/scripts/matrix_criteria.py",
                              description=__doc__.split("\n\n")[0])
  p.add_argument("--root", required=True, help="learning_runs.py --matrix's --root")
  p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated seeds")
  args = p.parse_args(argv)
  try:
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  except ValueError:
    p.error(f"--seeds={args.seeds!r}: expected comma-separated ints")
  if not os.path.isdir(args.root):
    print(f"error: no directory {args.root}", file=sys.stderr)
    return 2
  try:
    result = {"criteria": "matrix", "root": args.root,
              **criteria(args.root, seeds, game_families())}
  except CriteriaError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  with open(os.path.join(args.root, "criteria.md"), "w", encoding="utf-8") as f:
    f.write(markdown(result))
  print(json.dumps(result), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
