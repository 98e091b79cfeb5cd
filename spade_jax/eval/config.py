"""`config.eval`: held-out evaluation during training, as one frozen settings struct.

Every `every` steps (0 = never) the composition root runs `suites` on the current weights
(the training engine and sandbox pool), the first `limit` items of each with `samples`
responses and at most `max_new_tokens` tokens a reply; scalars go to TensorBoard as
eval/<suite>/<metric> and the records to <workdir>/eval/step_<N>.jsonl.
`hold_out_seed_games` keeps the held-out seed games (envs.library.HELDOUT_GAMES) out of the
memory and the replays, so seed_games_heldout stays held out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spade_jax.eval.suites import SUITES


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  suites: tuple[str, ...] = ()
  every: int = 0
  limit: int = 16
  samples: int = 1
  max_new_tokens: int = 1024
  hold_out_seed_games: bool = False

  def __post_init__(self):
    unknown = [s for s in self.suites if s not in SUITES]
    if unknown:
      raise ValueError(f"config.eval.suites has unknown suites {unknown}; known: "
                       f"{sorted(SUITES)}")
    for name in ("every", "limit", "samples", "max_new_tokens"):
      low = 0 if name == "every" else 1
      if getattr(self, name) < low:
        raise ValueError(f"config.eval.{name}={getattr(self, name)} must be >= {low}")

  def due(self, step: int) -> bool:
    return bool(self.suites) and self.every > 0 and step % self.every == 0

  @classmethod
  def from_config(cls, config: Any) -> EvalConfig:
    e = config.eval
    return cls(suites=tuple(str(s) for s in e.suites), every=int(e.every), limit=int(e.limit),
               samples=int(e.samples), max_new_tokens=int(e.max_new_tokens),
               hold_out_seed_games=bool(e.hold_out_seed_games))
