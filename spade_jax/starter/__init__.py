"""The starter policy: a small Qwen3 built offline from package data
(`python -m spade_jax.starter`)."""
