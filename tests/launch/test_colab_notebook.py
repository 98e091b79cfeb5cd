"""notebooks/colab_tpu_smoke.ipynb cannot rot: its launch command with the TPU settings makes
a valid experiment (`make test`), and its non-TPU cells run against the CPU smoke
(`make test-slow`).

A small stand-in for the notebook kernel: Python lines run in one namespace, `!` lines run
in a shell after IPython's `{name}` expansion, `%tensorboard --logdir D` checks that D holds
event files (the other magics are skipped). Cells tagged `tpu` (installation, the download,
the TPU overrides) are replaced by the settings below: this checkout, a temporary workdir
and the CPU shrinking of the smoke end-to-end test, so the launch and log cells run as
written.
"""

import json
import os
import shlex
import subprocess
import sys

import pytest

from launch import tpu_run
from spade_jax import config_schema
from tests.xla_flags import child_env

NOTEBOOK = config_schema.REPO_ROOT / "notebooks" / "colab_tpu_smoke.ipynb"
CPU_ARGS = ("--config.train.num_steps=1 --config.selfplay.num_envs=2 --config.selfplay.k=4 "
            "--config.selfplay.max_turns=2 --config.selfplay.memory.sample_size=0 "
            "--config.sampling.designer.max_new_tokens=16 "
            "--config.sampling.agent.max_new_tokens=8 --config.train.compilation_cache_dir=")


def _cells():
  cells = json.loads(NOTEBOOK.read_text())["cells"]
  return [c for c in cells if c["cell_type"] == "code"]


def _run_cell(source: str, namespace: dict, env: dict) -> list[str]:
  outputs, python = [], []
  for line in source.splitlines():
    if line.startswith("!"):
      command = line[1:].format_map(namespace)
      proc = subprocess.run(command, shell=True, capture_output=True, text=True, env=env,
                            timeout=1200, check=False)
      assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
      outputs.append(proc.stdout)
    elif line.startswith("%tensorboard"):
      logdir = line.split("--logdir", 1)[1].strip().format_map(namespace)
      assert any(n.startswith("events.out.tfevents") for n in os.listdir(logdir)), logdir
    elif not line.startswith("%"):
      python.append(line)
  exec("\n".join(python), namespace)  # noqa: S102 - the notebook's own settings cells
  return outputs


def _python_lines(source: str) -> str:
  return "\n".join(line for line in source.splitlines() if not line.startswith(("!", "%")))


@pytest.mark.parametrize("use_lora", [True, False])
def test_the_launch_cell_makes_a_valid_experiment_with_the_tpu_settings(use_lora):
  """`make test`'s share of the test below: the notebook's settings, its TPU cells' model
  arguments included, make a launch command that tpu_run.py parses and validates into an
  experiment (files unchecked: the weights are Colab's download)."""
  sources = ["".join(cell["source"]) for cell in _cells()]
  assert sum("USE_LORA = True" in source for source in sources) == 1
  namespace: dict = {}
  for source in sources:  # the settings cells, the LoRA switch set to `use_lora`
    exec(_python_lines(source.replace("USE_LORA = True", f"USE_LORA = {use_lora}")),  # noqa: S102
         namespace)
  launch = next(line for source in sources for line in source.splitlines()
                if "launch/tpu_run.py" in line)
  argv = shlex.split(launch[1:].format_map(namespace))
  args = argv[argv.index("launch/tpu_run.py"):]
  config, workdir, _ = tpu_run.parse_args(args)
  experiment = config_schema.validate(config, files=False)
  assert workdir == namespace["WORKDIR"] and experiment.model.preset == "qwen3-0.6b"
  assert experiment.model.lora_rank == (16 if use_lora else 0)


@pytest.mark.slow  # a whole launch of the CPU smoke config (`make test-slow`)
def test_notebook_cells_run_on_the_cpu_smoke_config(tmp_path):
  cells = _cells()
  tpu = [c for c in cells if "tpu" in c.get("metadata", {}).get("tags", [])]
  pinned = next(line.strip() for line in (config_schema.REPO_ROOT / "requirements.txt")
                .read_text().splitlines() if line.startswith("jax=="))
  assert len(tpu) == 3 and any(pinned.replace("jax", "jax[tpu]") in "".join(c["source"])
                               for c in tpu)  # the TPU install keeps the tested jax
  env = child_env(PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
  namespace: dict = {}
  outputs = []
  for cell in cells:
    if cell in tpu:
      continue
    outputs += _run_cell("".join(cell["source"]), namespace, env)
    if "WORKDIR" in namespace and "MODEL_ARGS" not in namespace:  # after the settings cell
      namespace.update(REPO=os.fspath(config_schema.REPO_ROOT),
                       WORKDIR=os.fspath(tmp_path / "colab_smoke"), MODEL_ARGS=CPU_ARGS)
  assert any("starting at step 1 of 1" in out for out in outputs)
  assert outputs[-1].strip().startswith("step 1/1 |")  # the log cell shows the step
