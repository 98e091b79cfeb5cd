"""The starter's configs, given to the launcher by path, load and validate: their model
presets and memory library exist because the configs import the project."""

import os
import subprocess
import sys
import textwrap

import pytest

from launch import tpu_run
from proj.starter import build
from spade_jax import config_schema
from spade_jax.rl.config import RLConfig


@pytest.mark.parametrize("name", ["starter", "starter_ci", "matrix"])
def test_the_configs_validate(name, tmp_path):
  config, workdir, _ = tpu_run.parse_args(["tpu_run.py", f"--config={build.config_path(name)}"])
  assert workdir.endswith(os.path.join("runs", name))
  config.model.checkpoint = config.tokenizer = os.fspath(tmp_path)  # the build's --out
  experiment = config_schema.validate(config)
  assert experiment.model.preset.startswith("starter")
  assert experiment.selfplay.library == "minigames"
  rl = RLConfig.from_config(config.rl)
  assert rl.beta > 0 and rl.kl_estimator == "k3" and rl.role_balance


def test_a_fresh_launcher_process_resolves_what_the_config_registers(tmp_path):
  """Nothing imported the project before the config: the launcher's own parse and
  validation find the "starter-ci" preset and the minigames library."""
  code = textwrap.dedent(f"""
      import sys
      from launch import tpu_run
      from spade_jax import config_schema
      assert "proj.starter.registry" not in sys.modules
      config, _, _ = tpu_run.parse_args(["tpu_run.py", "--config={build.config_path('starter_ci')}",
                                         "--config.model.checkpoint={tmp_path}",
                                         "--config.tokenizer={tmp_path}"])
      experiment = config_schema.validate(config)
      print(experiment.model.preset, experiment.selfplay.library)""")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=config_schema.REPO_ROOT, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split() == ["starter-ci", "minigames"]
