"""The decoder layers compile as one loop: the train step's TPU program does not grow with depth.

Compiled deviceless for a v5e-8 (spade_jax.tpu_aot) at small widths and two depths. Unrolled
layers repeat every layer's body in the HLO (about four times the dots at four times the
depth, and as much more compile time); layers under a scan keep one body.
"""

import re

import pytest
from absl import flags

from spade_jax import config_schema, tpu_aot
from spade_jax.plan_compile import compile_step_programs

pytestmark = pytest.mark.skipif(not tpu_aot.libtpu_available(),
                                reason="libtpu (requirements-test.txt) is not installed")

SMALL = dict(hidden_size=256, intermediate_size=768, num_heads=4, num_kv_heads=2, head_dim=64,
             vocab_size=4096)
_DOT = re.compile(r"= \S+ (dot|convolution)\(")


def _train_step(num_layers: int) -> tpu_aot.CompiledProgram:
  config, _ = config_schema.parse_config_args(
      ["plan", "--config", "games_lora.py", "--config.engine.max_cache_len=1024",
       "--config.engine.prefill_buckets=(256,)"], flags.FlagValues())
  experiment = config_schema.validate(config, files=False)
  reports = compile_step_programs(experiment, "v5e-8", programs=("train_step",),
                                  model_overrides=dict(SMALL, num_layers=num_layers))
  return reports["train_step"].program


def test_the_train_step_runs_its_layers_in_one_loop():
  shallow, deep = _train_step(2), _train_step(8)
  dots = [len(_DOT.findall(p.hlo)) for p in (shallow, deep)]
  print(f"train step on v5e-8: dots {dots[0]} at 2 layers, {dots[1]} at 8; compile "
        f"{shallow.compile_s:.1f} s at 2 layers, {deep.compile_s:.1f} s at 8")
  assert dots[1] == dots[0]  # one layer body whatever the depth
  assert deep.compile_s < 2 * shallow.compile_s + 5
