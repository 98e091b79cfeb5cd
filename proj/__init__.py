"""Projects built on spade_jax, each in its own folder beside the core (big_vision's proj/
convention): its package, configs, scripts and tests together. The core never imports them
(tests/test_layering.py); a project adds what it needs through the core's registries."""
