"""scripts/learning_report.py on event files written here with the project's SummaryWriter: the
figure's panels and lines, tags a variant lacks left out, the table equal to the scalars."""

import importlib.util
import json
import math
import pathlib

import numpy as np

from spade_jax.metrics.tensorboard import SummaryWriter

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "learning_report.py"
_SPEC = importlib.util.spec_from_file_location("learning_report", _PATH)
report = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(report)

TIMES = {"time/step_s": 10.0, "time/generate_s": 6.0, "time/sandbox_s": 1.0, "time/train_s": 3.0}


def _write(tb_dir, steps: dict[int, dict[str, float]]) -> None:
  writer = SummaryWriter(tb_dir)
  for step, values in steps.items():
    writer.scalars(values, step)
  writer.close()


def _spade_step(seed: int, step: int) -> dict[str, float]:
  base = 0.1 * seed + 0.01 * step
  return {"curriculum/valid_rate": 0.2 + base, "curriculum/regret_mean": base,
          "designer/reward_mean": math.nan if step == 1 else -0.5 + base,
          "designer/regret_valid_mean": 0.3 + base, "curriculum/diversity_vendi": 0.5,
          "curriculum/memory_size": 6.0 + step, "curriculum/learnable_share_step": 0.25,
          "train/loss": 0.1, **{k: v + step + seed for k, v in TIMES.items()}}


def _make_root(tmp_path):
  root = tmp_path / "root"
  for seed in (0, 1):
    tb = root / "discard" / f"seed{seed}" / "tb"
    steps = {s: _spade_step(seed, s) for s in (1, 2, 3)}
    steps[2]["eval/seed_games_heldout/return"] = 0.4 + seed
    steps[2]["eval/seed_games_heldout/return_with_hint"] = 0.6 + seed
    steps[3]["curriculum/learnable_share"] = 0.5 + 0.25 * seed
    _write(tb, {s: steps[s] for s in (1, 2)})  # first launch, interrupted after step 2
    first, = tb.iterdir()  # readers take the files in name order: the older one first
    first.rename(tb / "events.out.tfevents.0000000001.first")
    stale = {"curriculum/valid_rate": 0.99, "curriculum/memory_size": 99.0}
    _write(tb, {2: {**steps[2], **stale}, 3: steps[3]})  # the resumed launch
  fixed = {s: {"curriculum/regret_mean": 0.05 * s, "designer/reward_mean": math.nan,
               "curriculum/diversity_vendi": 0.3, "curriculum/memory_size": 4.0,
               "curriculum/learnable_share": 0.75, **TIMES} for s in (1, 2, 3)}
  _write(root / "grpo" / "seed0" / "tb", fixed)
  launches = [{"rc": None, "wall_s": 30.0}, {"rc": 0, "wall_s": 12.0}]  # learning_runs.py's
  (root / "discard" / "seed0" / report.RUN_RECORD).write_text(json.dumps({"launches": launches}))
  return root


def test_reads_the_last_value_of_each_step_and_drops_nan(tmp_path):
  data = report.collect(str(_make_root(tmp_path)))
  assert sorted(data) == ["discard", "grpo"] and sorted(data["discard"]) == [0, 1]
  run = data["discard"][1]
  assert run["curriculum/memory_size"] == {1: 7.0, 2: 99.0, 3: 9.0}  # the resumed write wins
  assert sorted(run["designer/reward_mean"]) == [2, 3]  # the NaN of step 1 is not data
  assert run[report.LAUNCH_TAG] == {1: 1.0, 2: 1.0}  # the first step of each event file
  assert "designer/reward_mean" not in data["grpo"][0]


def test_figure_has_every_panel_and_leaves_missing_tags_out(tmp_path):
  data = report.collect(str(_make_root(tmp_path)))
  png = tmp_path / "out" / "learning.png"
  fig = report.draw(data, str(png))
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
  assert list(axes) == [title for title, _, _ in report.PANELS]
  assert "held-out return" in axes and "Vendi / n" in axes
  labels = {title: [line.get_label() for line in ax.get_lines()] for title, ax in axes.items()}
  assert labels["valid rate"] == ["discard (2 seeds)"]  # grpo has no designer
  assert labels["designer reward"] == ["discard (2 seeds)"]  # its NaNs are not a line at 0
  assert labels["Vendi / n"] == ["discard (2 seeds)", "grpo (1 seeds)"]
  line = axes["memory size"].get_lines()[0]
  np.testing.assert_allclose(line.get_xdata(), [1, 2, 3])
  np.testing.assert_allclose(line.get_ydata(), [7.0, 99.0, 9.0])  # seeds 7/7, 99/99, 9/9
  valid = axes["valid rate"].get_lines()[0]
  np.testing.assert_allclose(valid.get_ydata(), [0.26, 0.99, 0.28], rtol=1e-6)


def test_table_and_summary_equal_the_written_scalars(tmp_path, capsys):
  root = _make_root(tmp_path)
  assert report.main(["--root", str(root)]) == 0
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["variants"]
  discard, grpo = summary["discard"], summary["grpo"]
  assert discard["seeds"] == [0, 1] and discard["steps"] == 3
  # valid rate of seed s: 0.21 + 0.1 s, 0.99 (the resumed write), 0.23 + 0.1 s
  np.testing.assert_allclose([discard["valid_rate_final"][k] for k in ("mean", "min", "max")],
                             [0.28, 0.23, 0.33], rtol=1e-6)
  np.testing.assert_allclose(discard["valid_rate_mean"]["mean"],
                             (0.21 + 0.99 + 0.23 + 0.31 + 0.99 + 0.33) / 6, rtol=1e-6)
  np.testing.assert_allclose(discard["heldout_return"]["mean"], 0.9, rtol=1e-6)
  np.testing.assert_allclose(discard["learnable_share"]["max"], 0.75)
  # time: step 3 only (steps 1 and 2 were the first of a launch: they compile): 10 + 3 + seed
  np.testing.assert_allclose(discard["step_s"]["mean"], 13.5, rtol=1e-6)
  np.testing.assert_allclose(discard["train_s"]["min"], 6.0, rtol=1e-6)
  assert grpo["valid_rate_final"] is None and grpo["regret_valid_designs"] is None
  table = (root / "learning.md").read_text().splitlines()
  assert table[0].startswith("| variant | seeds | steps | valid rate, final |")
  assert table[2].startswith("| discard | 0,1 | 3 | 0.280 [0.230, 0.330] |")
  assert table[3].startswith("| grpo | 0 | 3 | n/a | n/a | n/a | +0.100 | 0.750 | n/a |")
  assert table[2].endswith(
      "| 13.5 [13.0, 14.0] | 9.5 [9.0, 10.0] | 4.5 [4.0, 5.0] | 6.5 [6.0, 7.0] | 42 |")
  assert table[3].endswith(" | n/a |")  # no driver record
  assert (root / "learning.png").exists()


def test_empty_root_is_one_line(tmp_path, capsys):
  assert report.main(["--root", str(tmp_path)]) == 2
  assert capsys.readouterr().err.startswith("error: no event files under")


def _matrix_root(tmp_path):
  """A spade run of the matrix (training returns, minigames_heldout, a curriculum log with
  k = 3) and a grpo run evaluated on seed_games_heldout."""
  root = tmp_path / "matrix"
  spade = root / "spade" / "seed0"
  _write(spade / "tb", {s: {"agent/return_no_hint": 0.1 * s, "agent/return_hint": 0.2 * s,
                            "designer/regret_valid_mean": 0.05 * s,
                            **({"eval/minigames_heldout/return": 0.3,
                                "eval/minigames_heldout/return_with_hint": 0.5} if s == 4
                               else {})} for s in (1, 2, 3, 4)})
  (spade / "config.json").write_text(json.dumps({"selfplay": {"k": 3}}))
  regrets = {1: [0.5, 0.0], 4: [0.3, 0.1, 0.2, 0.25]}  # refresh 0: half matter, 1: half
  lines = [{"step": step, "memory": [], "envs": [
      {"uid": f"d{step}_{i}", "origin": "designed",
       "returns": {"no_hint": [0.0], "hint": [r]}} for i, r in enumerate(regrets.get(step, []))]}
           for step in range(1, 7)]
  lines[4]["envs"].append({"uid": "d4_0", "origin": "designed",  # its refresh: counted
                           "returns": {"no_hint": [0.0], "hint": [0.0]}})
  (spade / "curriculum.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
  _write(root / "grpo" / "seed0" / "tb",
         {s: {"agent/return_no_hint": 0.05 * s, "eval/seed_games_heldout/return": 0.7}
          for s in (1, 2)})
  return root


def test_panels_of_the_matrix(tmp_path, capsys):
  root = _matrix_root(tmp_path)
  data = report.collect(str(root))
  assert data["spade"][0][report.SHARE_TAG] == {1: 0.5, 4: 0.25}  # each refresh's first step
  assert report.SHARE_TAG not in data["grpo"][0]
  axes = {ax.get_title(): ax for ax in report.draw(data).axes if ax.get_title()}
  assert list(axes) == ["training return (dashed: hint)", "held-out return", "valid rate",
                        "regret of valid designs", "designer reward",
                        "share of designs whose hint matters", "memory size", "Vendi / n",
                        "wall time per step (s)"]
  train = {line.get_label(): line for line in axes["training return (dashed: hint)"].get_lines()}
  assert list(train) == ["grpo (1 seeds)", "spade (1 seeds)", "spade, hint"]
  assert train["spade, hint"].get_linestyle() == "--"
  assert train["spade (1 seeds)"].get_linestyle() == "-"
  np.testing.assert_allclose(train["spade, hint"].get_ydata(), [0.2, 0.4, 0.6, 0.8], rtol=1e-6)
  heldout = {line.get_label(): line for line in axes["held-out return"].get_lines()}
  np.testing.assert_allclose(heldout["grpo (1 seeds)"].get_ydata(), [0.7, 0.7], rtol=1e-6)
  np.testing.assert_allclose(heldout["spade (1 seeds)"].get_ydata(), [0.3], rtol=1e-6)
  share = axes["share of designs whose hint matters"].get_lines()
  assert [line.get_label() for line in share] == ["spade (1 seeds)"]
  np.testing.assert_allclose(share[0].get_xdata(), [1, 4])
  np.testing.assert_allclose(share[0].get_ydata(), [0.5, 0.25])
  regret = axes["regret of valid designs"].get_lines()[0]
  np.testing.assert_allclose(regret.get_ydata(), [0.05, 0.1, 0.15, 0.2], rtol=1e-6)
  assert report.main(["--root", str(root)]) == 0
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["variants"]
  assert summary["spade"]["heldout_suite"] == "minigames_heldout"
  assert summary["grpo"]["heldout_suite"] == "seed_games_heldout"
  np.testing.assert_allclose([summary["spade"]["heldout_return"]["mean"],
                              summary["spade"]["heldout_return_hint"]["mean"],
                              summary["grpo"]["heldout_return"]["mean"]], [0.3, 0.5, 0.7],
                             rtol=1e-6)
