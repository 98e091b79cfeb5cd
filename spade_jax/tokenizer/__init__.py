"""spade_jax.tokenizer."""
