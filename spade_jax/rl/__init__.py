"""spade_jax.rl."""
