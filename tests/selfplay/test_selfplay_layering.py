"""selfplay/ talks to the engine and the sandbox through their interfaces only.

It never imports the metrics, the launcher, the composition root (spade_jax.run) or the
config schema, so the data flows one way and no function-level import hides a cycle. The
one command in it, `selfplay/play.py`, wires concrete parts as a composition root does (a
scripted engine, the sandbox pool, a tokenizer); nothing in the package imports it.
"""

from tests.layering import imports_of, under, violations

SPADE_ALLOWED = ("spade_jax.selfplay", "spade_jax.engine.api", "spade_jax.sandbox.api",
                 "spade_jax.sandbox.contract", "spade_jax.rl.batch", "spade_jax.envs",
                 "spade_jax.checks")
FORBIDDEN = ("spade_jax.metrics", "spade_jax.run", "spade_jax.config_schema", "launch")
COMMANDS = {"selfplay/play.py": ("spade_jax.engine.fake", "spade_jax.sandbox",
                                 "spade_jax.tokenizer")}


def _allowed(name: str) -> bool:
  if under(name, FORBIDDEN):
    return False
  return not name.startswith("spade_jax") or under(name, SPADE_ALLOWED)


def test_selfplay_imports_only_interfaces_and_never_metrics_or_the_root():
  bad = [v for v in violations("selfplay", _allowed)
         if not under(v.split(": ")[1], COMMANDS.get(v.split(": ")[0], ()))]
  assert not bad, (f"selfplay/ may import only {SPADE_ALLOWED} of spade_jax and never "
                   f"{FORBIDDEN}; found: {bad}")


def test_nothing_imports_the_play_command():
  users = [path for path, names in imports_of("").items() if "spade_jax.selfplay.play" in names]
  assert not users, users


def test_package_exports_the_loop_and_its_settings():
  import spade_jax.selfplay as selfplay
  from spade_jax.selfplay.config import SelfPlayConfig
  from spade_jax.selfplay.loop import SelfPlayLoop
  assert selfplay.SelfPlayLoop is SelfPlayLoop and selfplay.SelfPlayConfig is SelfPlayConfig
  assert set(selfplay.__all__) >= {"SelfPlayLoop", "SelfPlayConfig", "StepRecord"}
