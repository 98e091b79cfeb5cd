"""sandbox/ is plain Python: it never imports jax, the model or any layer above it."""

import pathlib
import subprocess
import sys

from tests.layering import under, violations

FORBIDDEN = ("jax", "jaxlib", "flax", "optax", "orbax", "spade_jax.model", "spade_jax.engine",
             "spade_jax.rl", "spade_jax.selfplay", "spade_jax.metrics", "spade_jax.run",
             "spade_jax.config_schema", "spade_jax.tokenizer")


def test_sandbox_source_imports_no_jax_and_no_upper_layer():
  bad = violations("sandbox", lambda name: not under(name, FORBIDDEN))
  assert not bad, f"sandbox/ must stay plain Python; forbidden imports: {bad}"


def test_sandbox_package_import_loads_no_jax():
  code = ("import sys, spade_jax.sandbox, spade_jax.sandbox.check, spade_jax.sandbox.pool; "
          "bad = [m for m in ('jax', 'flax', 'optax', 'orbax', 'spade_jax.model') "
          "if m in sys.modules]; assert not bad, bad")
  root = pathlib.Path(__file__).parents[2]
  subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
