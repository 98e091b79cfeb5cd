"""The starter policy: a small Qwen3 built offline from package data (`spade_jax.starter`)."""
