"""The starter policy: a small Qwen3 built offline from package data, and the miniature loop
that starts from it (`python -m proj.starter`). Its model presets and "minigames" memory
library are registered with the core by importing `proj.starter.registry` (its configs and
its build do), so the plain-Python modules (variants, minigames) stay free of jax."""
