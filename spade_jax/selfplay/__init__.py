"""The SPADE self-play loop: designer, agent episodes, regret, memory, corpus, schedule.

`SelfPlayLoop(config, engine=..., pool=..., tokenizer=..., trainer=...)` runs one step per
`.step()` and returns a `StepRecord`; `SelfPlayConfig.from_config(config)` builds its
settings. The composition root that wires a real run is `spade_jax.run`.

The names are resolved on first use (PEP 562), so the jax-free parts of the package (the
corpus, the prompts) import without pulling in the engine.
"""

import importlib

_EXPORTS = {"SelfPlayLoop": "loop", "SelfPlayConfig": "config", "StepRecord": "record",
            "EnvReport": "record"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
