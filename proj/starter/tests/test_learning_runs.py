"""scripts/learning_runs.py with a fake launcher: the commands it builds, the check before
anything runs, skip / resume / refuse from the run records, and the report at the end."""

import importlib.util
import json
import pathlib

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
