"""scripts/learning_runs.py with a fake launcher: the commands it builds, the check before
anything runs, skip / resume / refuse from the run records, and the report at the end."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

from spade_jax.metrics.tensorboard import SummaryWriter

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "learning_runs.py"
_SPEC = importlib.util.spec_from_file_location("learning_runs", _PATH)
runs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(runs)

SMOKE = str(pathlib.Path(__file__).resolve().parents[3] / "configs" / "smoke.py")


class FakeLauncher:
  """Records each launch; exits with `codes[label]` (0 by default) after writing a step's
  scalars as a run would, or raises KeyboardInterrupt for the labels in `interrupt`."""

  def __init__(self, codes=None, interrupt=()):
    self.calls, self.codes, self.interrupt = [], dict(codes or {}), set(interrupt)

  def __call__(self, argv, workdir, label):
    self.calls.append((label, list(argv)))
    if label in self.interrupt:
      raise KeyboardInterrupt
    writer = SummaryWriter(pathlib.Path(workdir) / "tb")
    writer.scalars({"curriculum/regret_mean": 0.1, "time/step_s": 2.0}, 1)
    writer.close()
    return self.codes.get(label, 0)


def _args(root, *more):
  return ["--config", SMOKE, "--root", str(root), "--steps", "2", "--seeds", "0,1",
          "--variants", "spade,grpo", "--eval-every", "2", "--eval-limit", "2", *more]


def _record(root, variant, seed):
  return json.loads((root / variant / f"seed{seed}" / runs.RECORD).read_text())


def test_commands_of_the_matrix(tmp_path, capsys):
  root = tmp_path / "m"
  assert runs.main(_args(root, "--dry-run", "--config.rl.beta=0.0")) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 4 and not root.exists()
  spade0, grpo1 = lines[0], lines[3]
  assert spade0.startswith(f"python launch/tpu_run.py --config {SMOKE} --workdir "
                           f"{root}/spade/seed0 --config.seed=0 --config.train.num_steps=2 "
                           "'--config.eval.suites=('")
  assert "fixed_envs" not in spade0 and "designer_advantage" not in spade0
  assert f"--workdir {root}/grpo/seed1 --config.seed=1 " in grpo1
  assert "--config.selfplay.fixed_envs=grpo" in grpo1
  for line in lines:
    assert line.endswith("--config.eval.hold_out_seed_games=True --config.eval.every=2 "
                         "--config.eval.limit=2 --config.rl.beta=0.0")
  args, extra = runs.parse(_args(root, "--variants", "discard,two_level", "--eval-every", "0"))
  argv = runs.plan(args, extra)[0][2]
  assert "--config.selfplay.designer_advantage=discard" in argv
  assert "--config.eval.every=0" in argv and not [a for a in argv if "max_new_tokens" in a]


def test_bad_input_fails_before_anything_runs(tmp_path, capsys):
  launcher = FakeLauncher()
  with pytest.raises(SystemExit):
    runs.main(_args(tmp_path, "--variants", "spade,nope"), launcher)
  with pytest.raises(SystemExit):
    runs.main(_args(tmp_path, "--steps=3x"), launcher)
  assert runs.main(_args(tmp_path, "--config.selfplay.no_such_field=1"), launcher) == 2
  assert "error: spade/seed0: unknown config field" in capsys.readouterr().err
  assert launcher.calls == [] and not list(tmp_path.iterdir())


def test_skips_finished_runs_and_resumes_interrupted_ones(tmp_path, capsys):
  root = tmp_path / "m"
  first = FakeLauncher(codes={"grpo/seed0": 137}, interrupt={"grpo/seed1"})
  with pytest.raises(KeyboardInterrupt):
    runs.main(_args(root), first)
  assert [label for label, _ in first.calls] == ["spade/seed0", "spade/seed1", "grpo/seed0",
                                                 "grpo/seed1"]
  assert _record(root, "spade", 0)["done"] and not _record(root, "grpo", 0)["done"]
  assert _record(root, "grpo", 0)["launches"][0]["rc"] == 137
  killed = _record(root, "grpo", 1)
  assert not killed["done"] and killed["launches"][0]["rc"] is None
  assert killed["argv"] == first.calls[3][1]
  capsys.readouterr()
  second = FakeLauncher()
  assert runs.main(_args(root), second) == 0
  assert [label for label, _ in second.calls] == ["grpo/seed0", "grpo/seed1"]
  assert second.calls[0][1] == first.calls[2][1]  # the same command: tpu_run resumes
  record = _record(root, "grpo", 0)
  assert record["done"] and [lc["resumed"] for lc in record["launches"]] == [False, True]
  out = capsys.readouterr().out.splitlines()
  assert "spade/seed0: finished before, skipped" in out
  summary = json.loads(out[-1])
  assert summary["report"] == "learning" and sorted(summary["variants"]) == ["grpo", "spade"]
  assert summary["variants"]["grpo"]["run_wall_s"]["min"] >= 0.0  # from the run records
  assert (root / "learning.png").exists() and (root / "learning.md").exists()
  third = FakeLauncher()
  assert runs.main(_args(root, "--no-report"), third) == 0 and third.calls == []
  for seed in (0, 1):  # the first runs could start: the check of the grpo records comes first
    (root / "spade" / f"seed{seed}" / runs.RECORD).unlink()
  assert runs.main(_args(root, "--steps", "3"), third) == 2  # another command in that workdir
  assert "holds another command" in capsys.readouterr().err and third.calls == []


def test_missing_config_is_one_line(tmp_path, capsys):
  assert runs.main(["--root", str(tmp_path), "--config", "nope.py"], FakeLauncher()) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --config='nope.py': no such file") and err.count("\n") == 1


class MatrixLauncher(FakeLauncher):
  """FakeLauncher that also writes what the matrix reads: each sweep run's training return
  (`sweep_returns[lr label]` over 12 steps) and the baseline's 280 records."""

  SWEEP = {"lr3e-05": [0.9] * 2 + [0.2] * 10,  # the best start, but the last 10 steps count
           "lr0.0001": [0.0] * 2 + [0.5] * 10,
           "lr0.0003": [0.5] * 12}  # a tie with lr0.0001: the smaller lr wins

  def __call__(self, argv, workdir, label):
    if label == "baseline":
      assert (pathlib.Path(workdir).parent / "sweep" / runs.CHOICE).exists()
      out = pathlib.Path(argv[argv.index("--out") + 1])
      record = {"id": "mg2/peek/0/2000", "prompt": "", "responses": [], "answers": [],
                "scores": [], "score": None}
      out.write_text((json.dumps(record) + "\n") * runs.matrix_criteria.HELDOUT_ITEMS)
    rc = super().__call__(argv, workdir, label)
    if label.startswith("sweep/"):
      writer = SummaryWriter(pathlib.Path(workdir) / "tb")
      for step, value in enumerate(self.SWEEP[label.split("/")[1]], 1):
        writer.scalars({runs.SWEEP_METRIC: value}, step)
      writer.close()
    return rc


def _matrix_args(root, *more, report=False):
  return ["--matrix", "--config", SMOKE, "--root", str(root), "--steps", "2", "--seeds", "0",
          "--sweep-steps", "3", "--eval-max-new-tokens", "16", *([] if report else ["--no-report"]),
          "--config.eval.temperature=0.5", *more]


def test_matrix_runs_sweep_choice_baseline_then_runs(tmp_path, capsys):
  root = tmp_path / "m"
  launcher = MatrixLauncher()
  assert runs.main(_matrix_args(root), launcher) == 0
  labels = [label for label, _ in launcher.calls]
  assert labels == ["sweep/lr3e-05", "sweep/lr0.0001", "sweep/lr0.0003", "baseline",
                    "spade/seed0", "spade_frozen/seed0", "grpo/seed0"]
  argv = dict(launcher.calls)
  sweep = argv["sweep/lr0.0001"]
  assert sweep[sweep.index("--workdir") + 1] == f"{root}/sweep/lr0.0001/seed0"
  for arg in ("--config.seed=0", "--config.train.num_steps=3", "--config.selfplay.fixed_envs=grpo",
              "--config.eval.every=0", "--config.rl.learning_rate=0.0001"):
    assert arg in sweep
  choice = json.loads((root / "sweep" / runs.CHOICE).read_text())
  assert choice["lrs"] == [3e-5, 1e-4, 3e-4] and choice["chosen"] == 1e-4
  np.testing.assert_allclose(choice["scores"], [0.2, 0.5, 0.5])
  assert choice["metric"] == "mean agent/return_no_hint over the last 10 logged steps"
  assert argv["baseline"] == [  # the runs' checkpoint, tokenizer and evaluation sampling
      "-m", "proj.starter", "eval", "--checkpoint", "", "--tokenizer", "tiny", "--suite",
      "minigames_heldout", "--temperature", "0.5", "--max-new-tokens", "16", "--samples", "1",
      "--seed", "0", "--quiet", "--out", f"{root}/baseline.jsonl"]
  for label in ("spade/seed0", "spade_frozen/seed0", "grpo/seed0"):
    assert argv[label][-3:] == ["--config.eval.max_new_tokens=16",
                                "--config.rl.learning_rate=0.0001", "--config.eval.temperature=0.5"]
    assert "--config.eval.suites=('minigames_heldout',)" in argv[label]
    assert "--config.train.num_steps=2" in argv[label]
  assert "--config.selfplay.train_designer=False" in argv["spade_frozen/seed0"]
  assert "--config.selfplay.fixed_envs=grpo" in argv["grpo/seed0"]
  summary = json.loads(capsys.readouterr().out.splitlines()[-1])
  assert summary["lr"] == 1e-4 and summary["runs"]["baseline"] == "done"


def test_matrix_resumes(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(runs.matrix_criteria, "game_families", lambda: {})
  root = tmp_path / "m"
  assert runs.main(_matrix_args(root), MatrixLauncher(codes={"sweep/lr0.0003": 1})) == 1
  assert not (root / "sweep" / runs.CHOICE).exists() and not (root / "baseline.jsonl").exists()
  again = MatrixLauncher()
  assert runs.main(_matrix_args(root), again) == 0
  assert [label for label, _ in again.calls][:2] == ["sweep/lr0.0003", "baseline"]
  (root / "sweep" / "lr0.0003" / "seed0" / runs.RECORD).unlink()  # the choice stands
  lines = (root / "baseline.jsonl").read_text().splitlines()
  (root / "baseline.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # 279 records: again
  third = MatrixLauncher()
  assert runs.main(_matrix_args(root), third) == 0
  assert [label for label, _ in third.calls] == ["baseline"]
  fourth = MatrixLauncher()  # nothing left to run: the report and the criteria
  assert runs.main(_matrix_args(root, report=True), fourth) == 0 and fourth.calls == []
  out = capsys.readouterr().out.splitlines()
  assert f"baseline: {root}/baseline.jsonl holds 280 records, skipped" in out
  assert "grpo/seed0: finished before, skipped" in out
  assert json.loads(out[-2])["report"] == "learning" and (root / "learning.png").exists()
  criteria = json.loads(out[-1])  # the runs wrote no evaluations: n/a, no crash
  assert criteria["criteria"] == "matrix" and criteria["P1"]["verdict"] == "n/a"
  assert (root / "criteria.md").exists()
  fewer = MatrixLauncher()  # other lrs: the choice is made again (the same lr: runs skipped)
  assert runs.main(_matrix_args(root, "--sweep-lrs", "1e-4,3e-4"), fewer) == 0
  assert [label for label, _ in fewer.calls] == ["sweep/lr0.0003"]
  assert json.loads((root / "sweep" / runs.CHOICE).read_text())["lrs"] == [1e-4, 3e-4]
  (root / "sweep" / "lr0.0003" / "seed0" / runs.RECORD).unlink()
  other = MatrixLauncher()  # the choice is made again, and differs from the runs'
  assert runs.main(_matrix_args(root, "--sweep-lrs", "3e-4"), other) == 2
  assert [label for label, _ in other.calls] == ["sweep/lr0.0003"]
  assert json.loads((root / "sweep" / runs.CHOICE).read_text())["lrs"] == [3e-4]
  assert "spade/seed0: " in capsys.readouterr().err  # its workdir holds another command


def test_lr_choice_on_training_return():
  series = {s: 1.0 for s in range(1, 6)} | {s: 0.1 * (s - 5) for s in range(6, 16)}
  assert runs.sweep_score({runs.SWEEP_METRIC: series}) == pytest.approx(0.55)
  assert runs.sweep_score({"eval/minigames_heldout/return": series}) is None
  assert runs.choose_lr({3e-4: 0.5, 1e-4: 0.5, 3e-5: 0.4}) == 1e-4
  assert runs.choose_lr({3e-4: 0.6, 1e-4: 0.5}) == 3e-4


def test_matrix_dry_run(tmp_path, capsys):
  root = tmp_path / "m"
  assert runs.main(["--matrix", "--root", str(root), "--dry-run", "--config", SMOKE]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 3 + 1 + 1 + 9 + 2 and not root.exists()
  assert all("--config.train.num_steps=30 " in line for line in lines[:3])
  assert lines[3].startswith("# choose the lr")
  assert lines[4].startswith("python -m proj.starter eval")
  assert all(line.endswith("'--config.rl.learning_rate=<chosen>'") for line in lines[5:14])
  assert f"--workdir {root}/spade_frozen/seed2 " in lines[10]
  scripts = "python proj/starter/scripts"
  assert lines[14:] == [f"{scripts}/learning_report.py --root {root}",
                        f"{scripts}/matrix_criteria.py --root {root} --seeds 0,1,2"]
  (root / "sweep").mkdir(parents=True)
  (root / "sweep" / runs.CHOICE).write_text(json.dumps({"lrs": [3e-5, 1e-4, 3e-4], "chosen": 3e-4}))
  assert runs.main(["--matrix", "--root", str(root), "--dry-run", "--config", SMOKE]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == f"# {root}/sweep/{runs.CHOICE}: lr 0.0003 (reused, no sweep)"
  assert lines[2].endswith("--config.train.num_steps=120 '--config.eval.suites=('\"'\"'minigames_"
                           "heldout'\"'\"',)' --config.rl.learning_rate=0.0003")
