"""spade_jax: SPADE self-play (environment designer + reasoning agent) in JAX."""

__version__ = "0.1.0"
