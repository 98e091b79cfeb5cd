"""The starter policy: a small Qwen3 built offline from package data, and the miniature loop
that starts from it (`python -m proj.starter`). Importing the package registers its model
presets and its "minigames" memory library with the core (registry.py)."""

from proj.starter import registry

registry.register()
