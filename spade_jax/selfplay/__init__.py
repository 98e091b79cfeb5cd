"""spade_jax.selfplay."""
