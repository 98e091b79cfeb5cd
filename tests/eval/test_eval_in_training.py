"""config.eval: the settings check themselves; the composition root's evaluation writes
eval/<suite>/<metric> scalars and the records under the workdir."""

import glob

import pytest

from spade_jax.config_schema import base_config
from spade_jax.engine.fake import FakeEngine
from spade_jax.envs.library import HELDOUT_GAMES
from spade_jax.eval.config import EvalConfig
from spade_jax.metrics.logger import StepLogger
from spade_jax.run import run_evaluation
from spade_jax.sandbox.fake import FakePool
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.seed_envs import seed_entries
from spade_jax.tokenizer import load_tiny


def test_settings_defaults_off_and_checked():
  settings = EvalConfig.from_config(base_config())
  assert settings == EvalConfig() and not settings.due(16)
  assert EvalConfig(suites=("humaneval",), every=4).due(8)
  with pytest.raises(ValueError, match="unknown suites"):
    EvalConfig(suites=("nope",))
  with pytest.raises(ValueError, match="config.eval.limit"):
    EvalConfig(limit=0)
  with pytest.raises(ValueError, match="config.eval.temperature"):
    EvalConfig(temperature=-0.5)
  with pytest.raises(ValueError, match="config.eval.temperature"):
    EvalConfig(temperature=True)


@pytest.mark.parametrize("temperature, expected", [(None, 1.0), (0.25, 0.25)])
def test_run_evaluation_samples_at_the_eval_temperature(tmp_path, temperature, expected):
  """eval.temperature overrides the suite's own (seed_games_heldout samples at 1.0)."""
  tokenizer = load_tiny()
  action = tokenizer.encode("<action>1</action>") + [tokenizer.eos_id]
  seen = []
  engine = FakeEngine(lambda cid, history, params: seen.append(params.temperature) or action,
                      max_cache_len=4096)
  evals = EvalConfig(suites=("seed_games_heldout",), every=1, limit=1, max_new_tokens=16,
                     temperature=temperature)
  run_evaluation(evals, engine, FakePool(max_turns=2), tokenizer, 4096, str(tmp_path), step=1)
  assert seen and set(seen) == {expected}


def test_run_evaluation_writes_scalars_and_records(tmp_path):
  tokenizer = load_tiny()
  action = tokenizer.encode("<action>1</action>") + [tokenizer.eos_id]
  engine = FakeEngine(lambda cid, history, params: action, max_cache_len=4096)
  evals = EvalConfig(suites=("seed_games_heldout",), every=1, limit=2, max_new_tokens=16)
  pool = FakePool(max_turns=4)  # trusted seed sources only
  scalars = run_evaluation(evals, engine, pool, tokenizer, 4096, str(tmp_path), step=3)
  assert set(scalars) == {"eval/seed_games_heldout/return",
                          "eval/seed_games_heldout/return_with_hint",
                          "eval/seed_games_heldout/hint_gap"}
  assert (tmp_path / "eval" / "step_3.jsonl").read_text().count("\n") == 2
  logger = StepLogger(str(tmp_path), 10)
  logger.write_scalars(scalars, 3)
  logger.close()
  assert glob.glob(str(tmp_path / "tb" / "events.*"))
  assert "eval/seed_games_heldout/return=" in (tmp_path / "log.txt").read_text()


def test_hold_out_keeps_the_heldout_games_out_of_the_training_library():
  settings = SelfPlayConfig.from_config(base_config())
  everything = {e.uid for e in seed_entries(settings)}
  training = {e.uid for e in seed_entries(settings, "train")}
  assert {f"seed/{n}" for n in HELDOUT_GAMES} <= everything
  assert not {f"seed/{n}" for n in HELDOUT_GAMES} & training
  assert len(everything) - len(training) == len(HELDOUT_GAMES)
