"""The typed experiment: one struct per config section, each default written once, derived
fields computed when the experiment is built, and every constructor and command line taking
the structs' defaults."""

import dataclasses
import inspect
import pathlib
import re
import typing

import pytest
from absl import flags

from spade_jax import config_schema, run
from spade_jax.checks import ConfigError, settable_fields
from spade_jax.engine.config import EngineConfig
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.fake import FakeEngine
from spade_jax.engine.slot_engine import SlotEngine
from spade_jax.eval.__main__ import build_parser, engine_sizes
from spade_jax.experiment import SECTIONS, Experiment
from spade_jax.rl.config import RLConfig
from spade_jax.sandbox.config import SandboxConfig
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.selfplay.config import SelfPlayConfig


def test_every_section_of_the_base_config_is_its_structs_defaults():
  base = config_schema.base_config()
  experiment = config_schema.validate(base)
  for name, cls in SECTIONS.items():
    assert set(base[name].keys()) == {f.name for f in settable_fields(cls)}, name
    section = getattr(experiment, name)
    derived = {f.name: getattr(section, f.name) for f in dataclasses.fields(cls)
               if "derived" in f.metadata}
    if cls is RLConfig:  # unset, the schedule's horizon is the run
      derived["total_steps"] = experiment.train.num_steps
    assert section == cls(**derived), name
  # Self-play spans seed, setting, selfplay and sampling; its cache length is the engine's.
  assert experiment.selfplay == SelfPlayConfig(max_cache_len=EngineConfig.max_cache_len)
  defaults = {f.name: f.default for f in dataclasses.fields(Experiment)}
  assert (experiment.tokenizer, experiment.mesh) == (defaults["tokenizer"], defaults["mesh"])
  assert dict(base.mesh) == dict(defaults["mesh"])


def test_derived_fields_are_computed_when_the_experiment_is_built():
  config = config_schema.base_config()
  config.engine.max_cache_len = 4096
  config.sampling.designer.temperature, config.sampling.agent.temperature = 0.3, 0.7
  experiment = config_schema.validate(config)
  assert experiment.selfplay.max_cache_len == 4096
  assert (experiment.rl.agent_temperature, experiment.rl.designer_temperature) == (0.7, 0.3)
  assert experiment.rl.bounds.length == 4096  # and the rest of SelfPlayConfig.batch_bounds
  assert experiment.rl.bounds == experiment.selfplay.batch_bounds(experiment.train.num_steps)
  with pytest.raises(ConfigError,
                     match=r"config.rl.designer_temperature=1.0: expected the rollouts' 0.3"):
    dataclasses.replace(experiment,
                        rl=dataclasses.replace(experiment.rl, designer_temperature=1.0))
  with pytest.raises(ConfigError, match="selfplay.max_cache_len=8192: expected engine"):
    dataclasses.replace(experiment, selfplay=dataclasses.replace(experiment.selfplay,
                                                                 max_cache_len=8192))
  with pytest.raises(ConfigError, match="config.rl.bounds=None: expected BatchBounds"):
    dataclasses.replace(experiment, rl=dataclasses.replace(experiment.rl, bounds=None))


def test_the_root_takes_the_typed_experiment():
  assert typing.get_type_hints(run.run)["experiment"] is Experiment
  assert typing.get_type_hints(run.build_pool)["experiment"] is Experiment
  assert typing.get_type_hints(run.build_engine)["engine"] is EngineConfig


def _defaults(fn) -> dict:
  return {n: p.default for n, p in inspect.signature(fn).parameters.items()}


def test_engines_pools_and_command_lines_take_the_structs_defaults():
  e, sb = EngineConfig(), SandboxConfig()
  for engine in (SlotConversationEngine, SlotEngine):
    got = _defaults(engine.__init__)
    assert (got["num_slots"], got["max_cache_len"], tuple(got["prefill_buckets"])) == (
        e.num_slots, e.max_cache_len, e.prefill_buckets), engine
    assert (got["decode_widths"], got["decode_lengths"], got["append_lengths"],
            got["prefill_tokens"]) == (None, None, None, None)
  assert _defaults(SlotEngine.__init__)["decode_steps"] == e.decode_steps_per_poll
  fake = _defaults(FakeEngine.__init__)
  assert (fake["num_slots"], fake["steps_per_poll"]) == (e.num_slots, e.decode_steps_per_poll)
  pool = _defaults(SandboxPool.__init__)
  assert {k: pool[k] for k in dataclasses.asdict(sb)} == dataclasses.asdict(sb)
  args = build_parser().parse_args(["run", "--checkpoint", "c", "--suite", "humaneval"])
  assert engine_sizes(args) == {"num_slots": e.num_slots, "max_cache_len": e.max_cache_len,
                                "prefill_buckets": e.prefill_buckets}
  assert (args.num_workers, args.isolation) == (sb.num_workers, sb.isolation)
  args = build_parser().parse_args(["run", "--checkpoint", "c", "--suite", "x",
                                    "--num-slots", "3", "--prefill-buckets", "8", "16"])
  assert engine_sizes(args)["num_slots"] == 3 and engine_sizes(args)["prefill_buckets"] == (8, 16)


@pytest.mark.parametrize("override, message", [
    ("engine.num_slots=0", r"^config.engine.num_slots=0: expected an int >= 1$"),
    ("sandbox.num_workers=0", r"^config.sandbox.num_workers=0: expected > 0$"),
    ("sandbox.isolation=loose", r"^config.sandbox.isolation='loose': expected one of"),
    ("train.log_every=0", r"^config.train.log_every=0: expected an int >= 1$"),
    ("train.num_text_summaries=-1", r"^config.train.num_text_summaries=-1: expected an int >= 0$"),
    ("corpus.max_chars=0", r"^config.corpus.max_chars=0: expected an int >= 1$"),
    ("corpus.format=csv", r"^config.corpus.format='csv': expected one of"),
    ("eval.limit=0", r"^config.eval.limit=0: expected an int >= 1$"),
    ("rl.clip_low=1.5", r"^config.rl.clip_low=1.5: expected in \[0, 1\)$"),
    ("rl.learning_rate=0", r"^config.rl.learning_rate=0.0: expected > 0$"),
])
def test_every_section_fails_in_one_line_naming_the_field(override, message):
  config, _ = config_schema.parse_config_args(["prog", "--config=smoke.py",
                                               f"--config.{override}"],
                                              flags.FlagValues())
  with pytest.raises(ConfigError, match=message) as err:
    config_schema.validate(config)
  assert "\n" not in str(err.value)


def test_one_check_helper():
  """`require` and the number checks live in spade_jax/checks.py only."""
  package = pathlib.Path(config_schema.__file__).parent
  pattern = re.compile(r"^def _?(require|is_number|is_int)\(", re.M)
  defined = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if pattern.search(p.read_text()))
  assert defined == ["checks.py"]
