"""spade_jax.sandbox."""
