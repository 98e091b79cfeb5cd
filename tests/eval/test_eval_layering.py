"""eval/ sits above self-play: it never imports the composition root, the launcher, the
config schema, the metrics or the trainer, and nothing below it imports eval/."""

from tests.layering import imports_of, under, violations

FORBIDDEN = ("spade_jax.run", "spade_jax.config_schema", "spade_jax.metrics", "spade_jax.rl",
             "launch")
BELOW = ("model", "engine", "tokenizer", "sandbox", "envs", "selfplay", "rl", "metrics")


def test_eval_imports_nothing_above_it():
  bad = violations("eval", lambda name: not under(name, FORBIDDEN))
  assert not bad, f"eval/ must not import {FORBIDDEN}; found: {bad}"


def test_nothing_below_imports_eval():
  bad = [f"{path}: {name}" for part in BELOW for path, names in imports_of(part).items()
         for name in sorted(names) if under(name, ("spade_jax.eval",))]
  assert not bad, f"only the composition root and the config schema may import eval/: {bad}"
