"""`config.sandbox`: the jailed environment processes, one frozen struct with every default.

`SandboxPool` takes its constructor defaults from these fields, and so does every command
line that starts a pool, so a default is written here (or, for the limits the designer is
told about, in `contract`) and nowhere else.
"""

from __future__ import annotations

import dataclasses

from spade_jax.checks import is_number, require
from spade_jax.sandbox import contract
from spade_jax.sandbox.isolation import LEVELS


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
  """How many jails run, the limits of each environment process, the validator's rules."""

  num_workers: int = 16  # sandboxed environment processes (jails) running at once
  reset_timeout_s: float = contract.DEFAULT_RESET_TIMEOUT_S  # loading a source and reset()
  step_timeout_s: float = contract.DEFAULT_STEP_TIMEOUT_S  # wall clock for one step()
  memory_mb: int = contract.DEFAULT_MEMORY_MB  # address-space cap of an environment process
  isolation: str = "strict"  # "strict" | "basic" | "none": the least accepted (isolation.py)
  require_oracle: bool = False  # validator: designed envs must define oracle_actions()
  # Cap on the live episode processes' memory together (MiB; memcap.py kills the largest above
  # it); None: memcap.DEFAULT_FRACTION of the host's available memory when the pool starts.
  episodes_memory_mb: int | None = None

  def __post_init__(self):
    for name in ("num_workers", "reset_timeout_s", "step_timeout_s", "memory_mb"):
      value = getattr(self, name)
      require(is_number(value) and value > 0, f"sandbox.{name}", value, "> 0")
    require(isinstance(self.num_workers, int), "sandbox.num_workers", self.num_workers, "an int")
    require(self.isolation in LEVELS, "sandbox.isolation", self.isolation, f"one of {LEVELS}")
    require(self.episodes_memory_mb is None or (type(self.episodes_memory_mb) is int
                                                 and self.episodes_memory_mb > 0),
            "sandbox.episodes_memory_mb", self.episodes_memory_mb, "None or an int > 0")
    require(isinstance(self.require_oracle, bool), "sandbox.require_oracle",
            self.require_oracle, "a bool")
