"""Export a short self-play run's curriculum and play three of its environments through the
gymnasium adapter in the real sandbox pool: env_checker, a scripted policy, determinism."""

import io
import json
import re
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from spade_jax import export
from spade_jax.envs import gym as spade_gym
from spade_jax.envs.difficulty import at_level
from spade_jax.envs.library import load_seed_library
from spade_jax.metrics.logger import StepLogger
from spade_jax.sandbox.fake import FakePool
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.selfplay.loop import SelfPlayLoop
from tests.selfplay.selfplay_fakes import (
  ByteTokenizer,
  FakeTrainer,
  ListCorpus,
  ScriptedPolicy,
  designer_reply,
  make_engine,
  make_settings,
  seed_library,
)

TOK = ByteTokenizer()
DESIGNS = {0: designer_reply("A", "say win"), 1: designer_reply("B", "say win")}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  """Four steps of the real loop (scripted engine, fake pool), logged like a run."""
  workdir = tmp_path_factory.mktemp("run")
  policy = ScriptedPolicy(TOK, DESIGNS, lambda tag, hinted, step, turn:
                          "<action>win</action>" if hinted or step % 2 else "<action>lose</action>")
  loop = SelfPlayLoop(make_settings(memory_capacity=3), engine=make_engine(policy),
                      pool=FakePool(), tokenizer=TOK, trainer=FakeTrainer(), corpus=ListCorpus(),
                      seed_envs=seed_library())
  logger = StepLogger(workdir, num_steps=4, stream=io.StringIO())
  for _ in range(4):
    logger.observe(loop.step())  # what run.py does after every step
  logger.close()
  return workdir


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(num_workers=1, max_turns=8) as p:
    yield p


def test_export_lines_follow_each_environment_over_its_life(run_dir, tmp_path):
  out = tmp_path / "curriculum.jsonl"
  assert export.export(run_dir, out) == 4  # windows at steps 1 and 3, two designs each
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  assert [e["uid"] for e in lines] == ["d1.0", "d1.1", "d3.0", "d3.1"]
  first = lines[0]
  assert first["origin"] == "designed" and first["designed_step"] == 1
  assert first["hint"] == "say win" and "[env A]" in first["source"]
  assert first["validation"] == {"valid": True, "by": "sandbox validator",
                                 "difficulty_levels": None}
  # Played at steps 1 and 2: no hint wins only at odd steps -> 0.5 over its life; hint 1.0.
  assert [s["step"] for s in first["steps"]] == [1, 2]
  assert [s["win_rate"]["no_hint"] for s in first["steps"]] == [1.0, 0.0]
  assert first["win_rate"] == {"no_hint": 0.5, "hint": 1.0} and first["regret"] == 0.5
  # Memory holds 3 (2 seeds + designs, evictions by the frontier rule): the flags say which.
  in_memory = {e["uid"]: e["in_memory"] for e in lines}
  assert sum(in_memory.values()) <= 3 and in_memory["d3.0"]
  # --step cuts the log: after step 2 only the first window exists.
  assert export.export(run_dir, out, step=2) == 2
  with pytest.raises(ValueError, match="no step <= 0"):
    export.export(run_dir, out, step=0)


def test_cli_writes_the_file(run_dir, tmp_path, capsys):
  out = tmp_path / "c.jsonl"
  export.main(["--workdir", str(run_dir), "--out", str(out), "--step", "4"])
  assert capsys.readouterr().out.strip() == f"{out}: 4 environments"
  with pytest.raises(FileNotFoundError, match="curriculum.jsonl does not exist"):
    export.main(["--workdir", str(tmp_path), "--out", str(out)])


def test_cli_help_describes_every_option(capsys):
  with pytest.raises(SystemExit):
    export.main(["--help"])
  options = capsys.readouterr().out.split("options:")[1]
  undescribed = re.findall(r"^  (--[\w-]+)(?: [A-Z_]+)?$", options, re.M)
  assert "--workdir" in options and undescribed == []


def test_three_exported_environments_pass_env_checker_and_a_scripted_policy(run_dir, tmp_path,
                                                                            pool):
  out = tmp_path / "curriculum.jsonl"
  export.export(run_dir, out)
  lines = [json.loads(x) for x in out.read_text().splitlines()][:3]
  for line in lines:
    env = spade_gym.from_curriculum_line(line, pool=pool)
    with warnings.catch_warnings():
      warnings.simplefilter("error")  # any checker warning fails the test
      check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=7)
    tag = re.search(r"\[env (\w+)\]", line["source"]).group(1)
    assert obs in env.observation_space and obs.startswith(f"[env {tag}] instance ")
    obs, reward, terminated, truncated, _ = env.step("probe")  # scripted: probe, then win
    assert (reward, terminated, truncated) == (0.0, False, False) and obs.startswith("probed")
    obs, reward, terminated, truncated, _ = env.step("win")
    assert (obs, reward, terminated, truncated) == ("you win", 1.0, True, False)
    with pytest.raises(RuntimeError, match="after the episode ended"):
      env.step("win")
    env.close()


def test_a_leveled_seed_plays_in_the_sandbox_like_in_process(pool):
  seed = next(s for s in load_seed_library("games") if s.name == "coins")
  env = spade_gym.SandboxTextEnv(at_level(seed.source, 2), pool=pool)
  obs, _ = env.reset(seed=3)
  count = int(obs.split("numbered 1 to ")[1].split(".")[0])
  assert 82 <= count <= 243  # level 2's coin range
  _, reward, terminated, _, info = env.step("nonsense")
  assert reward == 0.0 and not terminated and "error" not in info
  env.close()
  assert isinstance(env.observation_space, gymnasium.spaces.Text)


def test_errors_end_the_episode_or_raise():
  crash = ("class Crash:\n  def reset(self, seed=None):\n    return 'go', {}\n"
           "  def step(self, action):\n    raise ValueError('boom')\n")
  env = spade_gym.SandboxTextEnv(crash, pool=FakePool(max_turns=4))
  env.reset(seed=0)
  _, reward, terminated, _, info = env.step("x")
  assert reward == 0.0 and terminated and "boom" in info["error"]
  broken = crash.replace("return 'go', {}", "raise KeyError('no reset')")
  with pytest.raises(RuntimeError, match="failed in reset.*no reset"):
    spade_gym.SandboxTextEnv(broken, pool=FakePool(max_turns=4)).reset(seed=0)


def test_from_curriculum_line_takes_the_raw_line_as_read_from_the_file(run_dir, tmp_path):
  out = tmp_path / "curriculum.jsonl"
  export.export(run_dir, out)
  with open(out) as f:
    raw = next(f)  # a str, trailing newline included
  observations = []
  for line in (raw, json.loads(raw)):
    env = spade_gym.from_curriculum_line(line, pool=FakePool(max_turns=4))
    observations.append(env.reset(seed=5)[0])
  assert observations[0] == observations[1]
  with pytest.raises(ValueError, match="curriculum line is not JSON"):
    spade_gym.from_curriculum_line(raw[:-5])
  with pytest.raises(ValueError, match="must be a JSON object, got list"):
    spade_gym.from_curriculum_line("[1, 2]")
