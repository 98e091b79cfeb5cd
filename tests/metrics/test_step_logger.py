"""StepLogger: TensorBoard scalars and text read back, console line, log.txt, chief-only files."""

import dataclasses
import io
import json
import os

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from spade_jax.metrics.logger import StepLogger, format_duration, no_update_line
from spade_jax.selfplay.record import EnvReport, StepRecord


def _record(step, refreshed, requests, valid):
  env = EnvReport(uid="d1.0", origin="designed", category="logic", source="class A: pass",
                  hint="count the vowels", first_observation="Say a word.",
                  returns={"no_hint": [0.0, 1.0], "hint": [1.0, 1.0]},
                  step_rewards={"no_hint": [0.0, 1.0], "hint": [1.0, 1.0]},
                  win_rate={"no_hint": 0.5, "hint": 1.0}, regret=0.5, dropped_episodes=0,
                  transcript={"no_hint": "obs -> act", "hint": "obs -> act (hinted)"})
  return StepRecord(step=step, refreshed=refreshed, num_envs=2, designer_requests=requests,
                    designer_valid=valid, designer_invalid_reasons={"no hint": requests - valid},
                    designed_envs=1, replayed_envs=0, envs=[env], agent_samples=4,
                    designer_samples=0, designer_rewards=[], dropped_episodes=0,
                    train_metrics={"loss": 0.1 * step, "kl": 0.0, "logprob_gap_mean": 0.0},
                    timings={"generate_s": 1.0, "sandbox_s": 0.5, "train_s": 2.0},
                    memory_size=3)


def _read(logdir):
  acc = EventAccumulator(logdir, size_guidance={"tensors": 0})
  acc.Reload()
  return {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
          for tag in acc.Tags()["tensors"]}


def test_writes_scalars_text_and_progress(tmp_path):
  ticks = iter([0.0, 10.0, 14.0, 18.0])
  out = io.StringIO()
  logger = StepLogger(tmp_path, num_steps=5, stream=out, clock=lambda: next(ticks))
  logger.write(_record(1, True, 4, 1))
  logger.write(_record(2, False, 0, 0))
  logger.write(_record(3, True, 2, 2))
  logger.close()
  events = _read(str(tmp_path / "tb"))
  assert [(s, float(v)) for s, v in events["curriculum/valid_rate"]] == [
      (1, 0.25), (2, 0.25), (3, 1.0)]  # carried forward on the non-refresh step
  assert [s for s, _ in events["train/loss"]] == [1, 2, 3]
  assert float(events["curriculum/learnable_share_step"][0][1]) == 0.5
  assert "curriculum/learnable_share" not in events  # the 16-step window has not closed
  assert b"count the vowels" in events["envs/0"][0][1].item()
  assert b"(hinted)" in events["rollouts/hint"][0][1].item()
  assert b"no hint: 3" in events["designer/invalid_reasons"][0][1].item()
  lines = out.getvalue().splitlines()
  assert lines[0].startswith("step 1/5 | valid 0.25 designed 1 replayed 0 learnable 0.50")
  assert lines[2].endswith("ETA 0m08s")  # 2 steps left x 4 s (first step excluded)
  assert (tmp_path / "log.txt").read_text().splitlines() == lines


def test_non_chief_prints_but_writes_no_files(tmp_path):
  logger = StepLogger(tmp_path, num_steps=1, is_chief=False, stream=io.StringIO())
  logger.write(_record(1, True, 1, 1))
  logger.close()
  assert os.listdir(tmp_path) == []


def test_a_step_without_samples_says_what_was_played_and_how_it_failed():
  record = dataclasses.replace(_record(3, False, 0, 0), train_metrics={}, agent_samples=0,
                               unplayable_episodes=3, dropped_episodes=1,
                               episode_errors={"timeout": 3, "infra": 1})
  assert no_update_line(record) == (
      "step 3: no samples, no update (1 environments, 3 episodes unplayable, 1 dropped; "
      "episode errors: infra 1, timeout 3; designer valid 0/0)")


def test_format_duration():
  assert format_duration(75) == "1m15s" and format_duration(7260) == "2h01m"
  assert format_duration(float("nan")) == "?"


def test_eta_counts_skipped_steps(tmp_path):
  ticks = iter([0.0, 30.0, 38.0])
  out = io.StringIO()
  logger = StepLogger(tmp_path, num_steps=10, stream=out, clock=lambda: next(ticks))
  logger.write(_record(2, True, 1, 1))  # compile-heavy first interval: left out
  logger.write(_record(4, False, 0, 0))  # 8 s for 2 steps
  logger.close()
  assert out.getvalue().splitlines()[1].endswith("ETA 0m24s")  # 6 steps x 4 s


def test_windowed_learnable_share_counts_unlogged_steps(tmp_path):
  # 20 steps; each has 1 learnable env of a budget of 2. Steps 1..16 are only observed (not
  # logged) except step 8; the window closes at 16, the last partial window at 20.
  logger = StepLogger(tmp_path, num_steps=20, stream=io.StringIO())
  shares = {}
  for t in range(1, 21):
    record = _record(t, t == 1, 1 if t == 1 else 0, 1 if t == 1 else 0)
    if t == 8:
      logger.write(record)
    share = logger.observe(record)
    if share is not None:
      shares[t] = share
  logger.close()
  assert shares == {16: 0.5, 20: 0.5}
  events = _read(str(tmp_path / "tb"))
  assert [(s, float(v)) for s, v in events["curriculum/learnable_share"]] == [(16, 0.5),
                                                                              (20, 0.5)]


def test_a_resumed_logger_carries_the_valid_rate_and_the_learnable_window(tmp_path):
  first = StepLogger(tmp_path / "a", num_steps=16, stream=io.StringIO())
  first.write(_record(1, True, 4, 1))
  for t in range(1, 11):  # one learnable environment of a budget of two each step
    first.observe(_record(t, t == 1, 4 if t == 1 else 0, 1 if t == 1 else 0))
  state = first.state_dict()
  first.close()
  resumed = StepLogger(tmp_path / "b", num_steps=16, stream=io.StringIO())
  resumed.load_state_dict(json.loads(json.dumps(state)))  # as the checkpoint's JSON holds it
  resumed.write(_record(11, False, 0, 0))  # observes step 11 too: one more learnable
  shares = [resumed.observe(dataclasses.replace(_record(t, False, 0, 0), envs=[]))
            for t in range(12, 17)]  # nothing learnable afterwards
  resumed.close()
  assert shares[-1] == 11 / 32  # the window spans steps 1..16, not just the new process's
  events = _read(str(tmp_path / "b" / "tb"))
  assert [(s, float(v)) for s, v in events["curriculum/valid_rate"]] == [(11, 0.25)]
