"""Config loading, `--config` path forms, overrides, locking and start-up validation."""

import dataclasses
import os
import subprocess
import sys

import pytest
from ml_collections import ConfigDict

from launch import tpu_run
from spade_jax import config_schema
from spade_jax.checks import settable_fields
from spade_jax.engine.api import SamplingParams
from spade_jax.rl.config import RLConfig
from spade_jax.selfplay.config import SelfPlayConfig, field_path, read_config, sampling_config


def _parse(*args):
  return tpu_run.parse_args(["tpu_run.py", *args])


@pytest.mark.parametrize("arg", ["games.py", "games", "configs/games.py",
                                 os.fspath(config_schema.CONFIG_DIR / "games.py")])
def test_config_path_forms(arg):
  config, workdir, distributed = _parse("--config", arg)
  assert config.selfplay.num_envs == 24 and config.selfplay.k == 4
  assert workdir == os.path.abspath(os.path.join("runs", "games")) and distributed == "auto"


def test_overrides_and_workdir():
  config, workdir, _ = _parse("--config=smoke.py", "--config.selfplay.k=3",
                              "--config.rl.learning_rate=3e-4", "--config.mesh.fsdp=2",
                              "--config.selfplay.skills=('deduction','planning')",
                              "--workdir=/tmp/w")
  assert config.selfplay.k == 3 and config.rl.learning_rate == 3e-4 and config.mesh.fsdp == 2
  assert tuple(config.selfplay.skills) == ("deduction", "planning") and workdir == "/tmp/w"


def test_every_trainer_setting_is_in_the_base_config_with_its_default():
  """So each RLConfig field can be overridden as --config.rl.NAME=VALUE (but the derived ones)."""
  rl = config_schema.base_config().rl
  defaults = {f.name: f.default for f in dataclasses.fields(RLConfig)}
  assert set(rl.keys()) == set(defaults) - {"agent_temperature", "designer_temperature",
                                            "bounds"}
  assert {k: rl[k] for k in rl.keys() if rl[k] != defaults[k]} == {}
  config, _, _ = _parse("--config=smoke.py", "--config.rl.logprob_positions=all")
  assert RLConfig.from_config(config.rl).logprob_positions == "all"


def test_selfplay_and_sampling_defaults_are_the_settings_defaults():
  """One source of truth: the base config's self-play fields are SelfPlayConfig' defaults."""
  settings = SelfPlayConfig.from_config(config_schema.base_config())
  defaults = SelfPlayConfig()
  assert settings == dataclasses.replace(defaults, max_cache_len=settings.max_cache_len)
  model = config_schema.base_config().model
  assert (model.param_dtype, model.compute_dtype, model.remat, model.attention_impl) == (
      "float32", "float32", "auto", "auto")


def _leaf_paths(node, path=""):
  """The dotted path of every value under a ConfigDict that is not itself a ConfigDict."""
  if not isinstance(node, ConfigDict):
    return {path}
  return {p for key in node.keys() for p in _leaf_paths(node[key], f"{path}.{key}".lstrip("."))}


def _changed(value):
  """A value of `value`'s type that differs from it (checks are not run on it)."""
  if isinstance(value, SamplingParams):
    return sampling_config(dataclasses.replace(value, max_new_tokens=value.max_new_tokens + 1))
  if isinstance(value, bool):
    return not value
  return {int: lambda v: v + 1, float: lambda v: v + 0.5, str: lambda v: v + "~",
          tuple: lambda v: (*v, "~")}[type(value)](value)


def test_every_selfplay_field_has_one_config_path_and_is_read_from_it():
  """A SelfPlayConfig field is written once: the base config holds exactly the settable
  fields at their paths (sampling roles as one dict each), and each is read back from there."""
  base = config_schema.base_config()
  fields = settable_fields(SelfPlayConfig)
  paths = {field_path(f.name) for f in fields}
  held = {p for section in ("seed", "setting", "selfplay", "sampling")
          for p in _leaf_paths(base[section], section)}
  roles = {p.rsplit(".", 1)[0] for p in held if p.startswith("sampling.")}
  assert {p for p in held if not p.startswith("sampling.")} | roles == paths
  for f in fields:
    *parents, leaf = field_path(f.name).split(".")
    section = base
    for name in parents:
      section = section[name]
    section[leaf] = _changed(f.default)
  read = read_config(base)
  assert read.keys() == {f.name for f in fields}
  for f in fields:
    expected = _changed(f.default)
    got = sampling_config(read[f.name]) if isinstance(f.default, SamplingParams) else read[f.name]
    assert got == expected, f.name


def test_an_unknown_selfplay_or_sampling_key_is_refused_naming_it():
  config = config_schema.base_config()
  config.selfplay.memory.size = 3
  config.sampling.critic = {"max_new_tokens": 8}
  with pytest.raises(config_schema.ConfigError,
                     match=r"^unknown config field\(s\) \['selfplay.memory.size', 'sampling.c"):
    SelfPlayConfig.from_config(config)


def test_the_schedule_horizon_is_the_run_unless_set():
  assert RLConfig().total_steps is None  # unset: the experiment derives it
  config, _, _ = _parse("--config=smoke.py", "--config.train.num_steps=7")
  assert config.rl.total_steps is None
  assert config_schema.validate(config).rl.total_steps == 7
  config, _, _ = _parse("--config=smoke.py", "--config.train.num_steps=7",
                        "--config.rl.total_steps=5", "--config.rl.schedule=cosine")
  assert config_schema.validate(config).rl.total_steps == 5
  with pytest.raises(config_schema.ConfigError, match=r"config.rl.total_steps=None: expected"):
    RLConfig(schedule="cosine")  # a trainer built on its own names its horizon


def test_trainer_temperatures_are_each_roles_rollouts():
  with pytest.raises(config_schema.ConfigError, match="unknown config field.*temperature"):
    _parse("--config=smoke.py", "--config.rl.agent_temperature=0.7")
  config, _, _ = _parse("--config=smoke.py", "--config.sampling.agent.temperature=0.7",
                        "--config.sampling.designer.temperature=0.3")
  experiment = config_schema.validate(config)
  assert (experiment.rl.agent_temperature, experiment.rl.designer_temperature) == (0.7, 0.3)


def test_model_remat_and_attention_kernel_reach_the_policy():
  from spade_jax.run import build_model  # pylint: disable=import-outside-toplevel
  config, _, _ = _parse("--config=smoke.py", "--config.model.remat=dots",
                        "--config.model.attention_impl=xla")
  experiment = config_schema.validate(config)
  cfg = build_model(experiment.model, experiment.seed, mesh=None).cfg
  assert (cfg.remat, cfg.attention_impl) == ("dots", "xla")


def test_build_model_refuses_a_kernel_the_platform_lacks_before_building():
  from spade_jax.run import build_model  # pylint: disable=import-outside-toplevel
  config, _, _ = _parse("--config=smoke.py", "--config.model.attention_impl=pallas_tpu")
  experiment = config_schema.validate(config)  # a known kernel: the platform check is the builder's
  with pytest.raises(ValueError, match=r"config.model.attention_impl='pallas_tpu' needs a tpu"):
    build_model(experiment.model, experiment.seed, mesh=None)


def test_engine_capacities_default_to_none_and_take_tuples():
  engine = config_schema.base_config().engine  # every shipped config sets its own
  assert engine.decode_widths is None and engine.decode_lengths is None
  config, _, _ = _parse("--config=smoke.py", "--config.engine.decode_lengths=(1024, 2048)")
  assert tuple(config.engine.decode_lengths) == (1024, 2048)
  config_schema.validate(config)


def test_a_none_default_takes_its_own_type_from_the_command_line():
  """An `X | None` field's placeholder takes an X: eval.temperature a float, not a tuple."""
  config, _, _ = _parse("--config=smoke.py")
  assert config.eval.temperature is None
  config, _, _ = _parse("--config=smoke.py", "--config.eval.temperature=0.5")
  assert config_schema.validate(config).eval.temperature == 0.5


def test_compilation_cache_directory_is_created_and_handed_to_jax(tmp_path, monkeypatch):
  import jax  # pylint: disable=import-outside-toplevel
  updates = []
  monkeypatch.setattr(jax.config, "update", lambda name, value: updates.append((name, value)))
  tpu_run.use_compilation_cache("")
  assert not updates
  tpu_run.use_compilation_cache(os.fspath(tmp_path / "xla"))
  assert updates == [("jax_compilation_cache_dir", os.fspath(tmp_path / "xla"))]
  assert (tmp_path / "xla").is_dir()
  tpu_run.use_compilation_cache("gs://bucket/xla")  # a URL is JAX's to open, not a local dir
  assert updates[-1] == ("jax_compilation_cache_dir", "gs://bucket/xla")
  assert not os.path.exists("gs:")


def test_a_relative_compilation_cache_lives_under_the_workdir():
  resolve = tpu_run.compilation_cache_dir
  assert resolve("xla_cache", "gs://b/run") == "gs://b/run/xla_cache"  # the default
  assert resolve("xla_cache", "/runs/a") == "/runs/a/xla_cache"
  assert resolve("~/.cache/xla", "gs://b/run") == "~/.cache/xla"  # shared, as named
  assert resolve("gs://b/xla", "/runs/a") == "gs://b/xla"
  assert resolve("", "gs://b/run") == ""
  assert config_schema.base_config().train.compilation_cache_dir == "xla_cache"


def test_typo_in_override_fails_naming_the_field():
  with pytest.raises(config_schema.ConfigError) as err:
    _parse("--config=smoke.py", "--config.train.num_steps=2", "--config.selfplay.kk=3")
  assert str(err.value) == ("unknown config field selfplay.kk (overrides: "
                            "--config.train.num_steps=2 --config.selfplay.kk=3)")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_the_flags_and_exits_0(flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    _parse(flag)
  out = capsys.readouterr().out
  assert exit_info.value.code == 0
  assert out.startswith("usage: python launch/tpu_run.py --config NAME")
  assert all(f"--{name}:" in out for name in ("config", "workdir", "distributed"))
  assert not any(word in out for word in ("--flagfile", "--undefok", "absl")), out


def test_locked_config_rejects_new_fields():
  config, _, _ = _parse("--config=smoke.py")
  with pytest.raises(AttributeError):
    config.selfplay.new_field = 1


def test_unknown_config_module_lists_available():
  with pytest.raises(config_schema.ConfigError, match="available configs.*smoke"):
    _parse("--config=nope.py")


@pytest.mark.parametrize("name", ["smoke", "games", "tool_use", "games_lora", "games_8b"])
def test_shipped_configs_validate(name, tmp_path):
  config, _, _ = _parse(f"--config={name}")
  if config.model.checkpoint:  # the TPU configs point at a checkpoint dir on the TPU VM
    config.model.checkpoint = config.tokenizer = os.fspath(tmp_path)
  config_schema.validate(config)
  rl = RLConfig.from_config(config.rl)
  assert rl.beta > 0 and rl.kl_estimator == "k3" and rl.role_balance  # the paper's KL-GRPO


@pytest.mark.parametrize("override, message", [
    ("selfplay.k=0", r"config.selfplay.k=0: expected an int >= 1"),
    ("selfplay.group_size=1", r"config.selfplay.group_size=1: expected an int >= 2"),
    ("model.preset=qwen9-1t", r"config.model.preset='qwen9-1t': expected one of"),
    ("model.checkpoint=/no/such/ckpt", r"config.model.checkpoint='/no/such/ckpt': no such"),
    ("model.attention_impl=flash", r"config.model: ModelConfig.attention_impl='flash'; expected"),
    ("tokenizer=./missing_tok", r"config.tokenizer='./missing_tok': no such"),
    ("selfplay.categories_per_step=9", r"categories_per_step=9: expected <= len"),
    ("selfplay.skills=('deduction','lookup')", r"skills=.*categories of the games setting"),
    ("selfplay.designer_reward=novelty", r"designer_reward='novelty': expected one of"),
    ("selfplay.designer_advantage=best", r"config.selfplay.designer_advantage='best': expected "
     r"one of \('discard', 'penalty', 'two_level'\)$"),
    ("sampling.agent.temperature=0", r"sampling.agent.temperature=0.0: expected > 0"),
    ("sampling.agent.top_p=0", r"config.sampling.agent.top_p=0.0: expected in \(0, 1\]"),
    ("model.remat=all", r"config.model: ModelConfig.remat='all'; expected one of"),
    ("model.compute_dtype=int8", r"config.model: ModelConfig.compute_dtype='int8'"),
    ("selfplay.library=mine", r"config.selfplay.library='mine': expected one of"),
    ("selfplay.memory.capacity=0", r"config.selfplay.memory.capacity=0: expected an int >= 1"),
    ("rl.kl_estimator=k9", r"config.rl.kl_estimator='k9'"),
    ("mesh.fsdp=0", r"config.mesh=.*sizes >= 1"),
    ("selfplay.action_format=<a></a>", r"action_format='<a></a>': expected a string"),
    ("corpus.paths=('/no/corpus/*.txt',)", r"corpus.paths: '/no/corpus/\*.txt' matches no"),
    ("engine.prefill_buckets=(512, 8192)", r"prefill_buckets=.*<= engine.max_cache_len"),
    ("engine.decode_lengths=(4096, 1024)", r"engine.decode_lengths=.*increasing ints"),
    ("engine.decode_widths=(0, 8)", r"engine.decode_widths=.*increasing ints"),
    ("engine.append_lengths=(8192, 4096)", r"engine.append_lengths=.*increasing ints"),
    ("engine.prefill_tokens=0", r"engine.prefill_tokens=0: expected an int >= 1"),
])
def test_bad_values_fail_naming_the_field(override, message):
  config, _, _ = _parse("--config=smoke.py", f"--config.{override}")
  with pytest.raises(config_schema.ConfigError, match=message):
    config_schema.validate(config)


def test_hub_id_checkpoint_is_left_to_the_loader():
  config, _, _ = _parse("--config=smoke.py", "--config.model.checkpoint=Qwen/Qwen3-0.6B")
  config_schema.validate(config)


def test_command_line_exits_with_the_message():
  proc = subprocess.run([sys.executable, os.fspath(config_schema.REPO_ROOT / "launch/tpu_run.py"),
                         "--config", "smoke.py", "--config.selfplay.k=0"],
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 1
  # One line and nothing else: no traceback, nothing on stdout.
  assert (proc.stdout, proc.stderr) == ("", "error: config.selfplay.k=0: expected an int >= 1\n")


@pytest.mark.parametrize("env, expected", [
    ({}, False), ({"TPU_WORKER_HOSTNAMES": "10.0.0.2"}, False),
    ({"TPU_WORKER_HOSTNAMES": "10.0.0.2,10.0.0.3"}, True),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234"}, True)])
def test_several_hosts_detection(monkeypatch, env, expected):
  for name in ("TPU_WORKER_HOSTNAMES", "JAX_COORDINATOR_ADDRESS"):
    monkeypatch.delenv(name, raising=False)
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  assert tpu_run._several_hosts() is expected  # pylint: disable=protected-access


def test_mesh_that_does_not_fit_the_devices_fails_at_start(tmp_path):
  config, _, _ = _parse("--config=smoke.py", "--config.mesh.fsdp=3")  # the session has 8
  with pytest.raises(config_schema.ConfigError, match=r"config.mesh: .*needs 3 devices"):
    tpu_run.launch(config, os.fspath(tmp_path))
  config, _, _ = _parse("--config=smoke.py", "--config.mesh.fsdp=-1",
                        "--config.engine.replica_chips=3")
  with pytest.raises(config_schema.ConfigError, match=r"^config.engine.replica_chips=3 must "
                                                      r"divide the mesh's 8 chips"):
    tpu_run.launch(config, os.fspath(tmp_path))
