"""`config.eval`: held-out evaluation during training, as one frozen struct.

Every `every` steps (0 = never) the composition root runs `suites` on the current weights
(the training engine and sandbox pool), the first `limit` items of each with `samples`
responses and at most `max_new_tokens` tokens a reply, sampled at `temperature` (None: each
suite's own; a policy trained to act at a low temperature is measured as it acts); scalars
go to TensorBoard as eval/<suite>/<metric> and the records to <workdir>/eval/step_<N>.jsonl.
`hold_out_seed_games` keeps the held-out seed games (envs.library.HELDOUT_GAMES) out of the
memory and the replays, so seed_games_heldout stays held out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spade_jax.checks import from_section, is_int, require
from spade_jax.eval.suites import SUITES


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """Which suites run on the current weights, how often, and how much of each."""

  suites: tuple[str, ...] = ()
  every: int = 0
  limit: int = 16
  samples: int = 1
  max_new_tokens: int = 1024
  temperature: float | None = None  # None: the suite's own sampling temperature
  hold_out_seed_games: bool = False

  def __post_init__(self):
    unknown = [s for s in self.suites if s not in SUITES]
    require(not unknown, "eval.suites", self.suites,
            f"suite names (unknown suites {unknown}; known: {sorted(SUITES)})")
    for name in ("every", "limit", "samples", "max_new_tokens"):
      low = 0 if name == "every" else 1
      require(is_int(getattr(self, name)) and getattr(self, name) >= low, f"eval.{name}",
              getattr(self, name), f"an int >= {low}")
    require(self.temperature is None or (isinstance(self.temperature, int | float)
                                         and not isinstance(self.temperature, bool)
                                         and self.temperature >= 0),
            "eval.temperature", self.temperature, "None or a number >= 0")
    require(isinstance(self.hold_out_seed_games, bool), "eval.hold_out_seed_games",
            self.hold_out_seed_games, "a bool")

  def due(self, step: int) -> bool:
    return bool(self.suites) and self.every > 0 and step % self.every == 0

  @classmethod
  def from_config(cls, config: Any) -> EvalConfig:
    """The struct of `config.eval`."""
    return from_section(cls, config.eval, "eval")
