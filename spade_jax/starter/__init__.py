"""spade_jax.starter: a starter policy built offline from package data (issue 22)."""
