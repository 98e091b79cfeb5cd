"""spade_jax.engine."""
