"""spade_jax.metrics."""
