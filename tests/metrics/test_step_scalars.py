"""Step metrics on hand-built StepRecords: every value checked exactly."""

import math

import numpy as np
import pytest

from spade_jax.metrics import step_scalars
from spade_jax.selfplay.record import EnvReport, StepRecord


def _env(uid, origin, no_hint, hint, rewards=None, source=None, hint_text="", obs=""):
  rate = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
  regret = None if not (no_hint and hint) else rate(hint) - rate(no_hint)
  return EnvReport(uid=uid, origin=origin, category="logic", source=source or f"class {uid}: x",
                   hint=hint_text, first_observation=obs,
                   returns={"no_hint": no_hint, "hint": hint},
                   step_rewards=rewards or {"no_hint": no_hint, "hint": hint},
                   win_rate={"no_hint": rate(no_hint), "hint": rate(hint)}, regret=regret,
                   dropped_episodes=0, transcript={"no_hint": "", "hint": ""})


def _record(envs, **kw):
  fields = dict(step=1, refreshed=True, num_envs=6, designer_requests=4, designer_valid=1,
                designer_invalid_reasons={"parse/no_code_block": 2, "sandbox/hackable": 1},
                designed_envs=1,
                replayed_envs=len(envs) - 1, envs=envs, agent_samples=8, designer_samples=4,
                designer_rewards=[-1.0, -1.0, -1.0, 0.5], dropped_episodes=2,
                train_metrics={"loss": 0.5, "kl": 0.01, "logprob_gap_mean": 0.002},
                timings={"generate_s": 3.0, "sandbox_s": 1.0, "train_s": 2.0, "step_s": 6.5},
                memory_size=9)
  fields.update(kw)
  return StepRecord(**fields)


def test_step_metrics_exact_values():
  envs = [
      _env("d1", "designed", [0.0, 1.0], [1.0, 1.0],
           rewards={"no_hint": [0.0, 0.0, 1.0], "hint": [0.25, 0.75, 1.0]}, source="alpha beta",
           hint_text="Use the sum of the two dice modulo six.",
           obs="Roll dice. Hint: use the sum of the two dice modulo six to win."),
      _env("seed/a", "replayed", [0.0, 0.0], [0.0, 1.0], source="gamma delta",
           hint_text="Sort first.", obs="Numbers: 3 1 2"),
      _env("seed/b", "replayed", [1.0, 1.0], [1.0, 1.0], source="epsilon zeta"),
  ]
  m = step_scalars.step_metrics(_record(envs, designer_regrets=[0.5], designs_without_regret=1,
                                      envs_without_regret=2, unplayable_episodes=3))
  assert m["curriculum/valid_rate"] == 0.25
  assert m["curriculum/diversity_vendi_per_n"] == pytest.approx(3 / 6)  # n = the budget, 6
  assert m["curriculum/envs_without_regret"] == 2.0 and m["curriculum/unplayable_episodes"] == 3
  assert m["designer/regret_valid_mean"] == 0.5 and m["designer/without_regret"] == 1.0
  assert m["curriculum/invalid/no_code_block"] == 2.0 and m["curriculum/invalid/hackable"] == 1.0
  assert m["curriculum/designed_envs"] == 1.0
  assert m["curriculum/replayed_envs"] == 2.0
  assert m["curriculum/learnable_share_step"] == 1 / 6  # only d1 (0.5); budget 6, 3 unfilled
  assert m["curriculum/regret_mean"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
  assert m["curriculum/diversity_vendi"] == pytest.approx(1.0)  # disjoint sources
  # d1: {0, 1, 0.25, 0.75} -> 4 levels (2 partial); seed/a: {0, 1} -> 2; seed/b: {1} -> 1.
  assert m["curriculum/reward_levels"] == pytest.approx(7 / 3)
  assert m["curriculum/partial_reward_levels"] == pytest.approx(2 / 3)
  assert m["curriculum/formula_reveal_rate"] == 0.5  # d1 reveals; seed/a does not; b no hint
  assert m["agent/return_no_hint"] == pytest.approx(3 / 6)
  assert m["agent/return_hint"] == pytest.approx(5 / 6)
  assert m["agent/win_rate_no_hint"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
  assert m["curriculum/dropped_episodes"] == 2.0
  assert m["curriculum/memory_size"] == 9.0
  assert m["designer/reward_mean"] == pytest.approx(-2.5 / 4)
  assert m["train/loss"] == 0.5 and m["train/kl"] == 0.01
  assert m["train/logprob_gap_mean"] == 0.002
  # Each trainer metric once, under its own name (no second copy of the mean gap).
  assert sorted(t for t in m if t.startswith("train/")) == [
      "train/kl", "train/logprob_gap_mean", "train/loss"]
  assert m["time/generate_s"] == 3.0 and m["time/step_s"] == 6.5


def test_learnable_bounds_inclusive_and_unmeasured_arm():
  envs = [_env("a", "designed", [0.2], [1.0]), _env("b", "designed", [0.8], [1.0]),
          _env("c", "designed", [0.81], [1.0]), _env("d", "designed", [], [1.0])]
  m = step_scalars.step_metrics(_record(envs, num_envs=4))
  assert m["curriculum/learnable_share_step"] == 0.5
  assert m["curriculum/regret_mean"] == pytest.approx((0.8 + 0.2 + 0.19) / 3)


def test_no_generation_and_no_envs():
  m = step_scalars.step_metrics(_record([], refreshed=False, designer_requests=0,
                                      designer_valid=0, designed_envs=0, replayed_envs=0))
  assert "curriculum/valid_rate" not in m
  m = step_scalars.step_metrics(_record([], refreshed=False, designer_requests=0,
                                      designer_valid=0, designed_envs=0, replayed_envs=0,
                                      designer_invalid_reasons={}))
  assert not [tag for tag in m if tag.startswith("curriculum/invalid/")]
  assert m["curriculum/learnable_share_step"] == 0.0
  for tag in ("curriculum/regret_mean", "curriculum/diversity_vendi", "agent/return_hint",
              "curriculum/formula_reveal_rate", "curriculum/reward_levels"):
    assert math.isnan(m[tag]), tag


def test_reveal_proxy():
  hint = "Apply Ohm's law: V = I * R, then round."
  assert step_scalars.reveals_hint("Remember V = I * R, then round to 2 places.", hint)
  assert not step_scalars.reveals_hint("Find the voltage across the resistor.", hint)
  assert step_scalars.reveals_hint("... use BFS ...", "Use BFS")  # short hint: all of it
  assert not step_scalars.reveals_hint("anything", "")


def test_missing_trainer_metric_is_an_error():
  with pytest.raises(KeyError, match="train_metrics.kl"):
    step_scalars.step_metrics(_record([], train_metrics={"loss": 1.0, "logprob_gap_mean": 0.0}))


def test_windowed_learnable_share_by_hand():
  # Window of 4 steps, budget 6 per step. Learnable envs per step: 1, 3, 0 (no valid env
  # at all), 2 -> (1 + 3 + 0 + 2) / (4 * 6) = 0.25; the per-step values average the same
  # here but the window sums, so an empty step weighs as a full budget of zeros.
  learnable, other = ([0.5], [1.0]), ([1.0], [1.0])
  steps = [[_env("a", "designed", *learnable), _env("b", "designed", *other)],
           [_env(f"c{i}", "designed", *learnable) for i in range(3)],
           [],
           [_env("d", "designed", *learnable), _env("e", "designed", *learnable),
            _env("f", "designed", *other)]]
  window = step_scalars.LearnableWindow(size=4)
  got = [window.add(_record(envs, step=t)) for t, envs in enumerate(steps, 1)]
  assert got[:3] == [None, None, None] and got[3] == pytest.approx(6 / 24)
  # The next window starts from zero: step 5 alone, 2 learnable of 6.
  assert window.add(_record(steps[1][:2], step=5)) is None
  assert window.value() == pytest.approx(2 / 6)
  # A budget that changes between steps weighs each step by its own budget.
  w = step_scalars.LearnableWindow(size=2)
  w.add(_record(steps[0], step=1, num_envs=2))
  assert w.add(_record(steps[1], step=2, num_envs=8)) == pytest.approx((1 + 3) / 10)


def test_sentence_embedding_vendi_uses_the_given_embedder():
  class TwoWay:  # sources starting with "x" point one way, the rest the orthogonal way
    def embed(self, docs):
      return np.array([[1.0, 0.0] if d.startswith("x") else [0.0, 1.0] for d in docs])
  envs = [_env("a", "designed", [0.5], [1.0], source="x1"),
          _env("b", "designed", [0.5], [1.0], source="x2"),
          _env("c", "designed", [0.5], [1.0], source="y")]
  m = step_scalars.step_metrics(_record(envs), embedder=TwoWay())
  # K/n eigenvalues 2/3 and 1/3: Vendi = exp(H) with H the entropy of (2/3, 1/3).
  h = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
  assert m["curriculum/diversity_vendi_embedding"] == pytest.approx(math.exp(h) / 3)
  assert "curriculum/diversity_vendi_embedding" not in step_scalars.step_metrics(_record(envs))


def test_difficulty_mean_only_with_levels():
  envs = [_env("a", "fixed", [1.0], []), _env("b", "fixed", [0.0], []),
          _env("c", "fixed", [0.0], [])]
  envs[0].difficulty, envs[1].difficulty = 2, 1  # c declares no levels
  assert step_scalars.step_metrics(_record(envs))["curriculum/difficulty_mean"] == 1.5
  envs[0].difficulty = envs[1].difficulty = None
  assert "curriculum/difficulty_mean" not in step_scalars.step_metrics(_record(envs))
