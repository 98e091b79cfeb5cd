"""The environment memory: a bounded buffer of environments that favours the learning frontier.

The paper's target is "solvable with the hint, not without", so the memory ranks by SIGNED
regret. An entry is on the *frontier* when the agent's no-hint win rate lies in
[FRONTIER_LOW, FRONTIER_HIGH] (it can learn there) or was never measured (a seed not yet
played: unknown counts as promising), AND its hint does not hurt (regret >= 0 or unmeasured).
An entry whose hint hurts (regret < 0: a misleading hint) may stay as a negative example the
designer sees with its regret, but is never on the frontier and earns no regret credit.

Eviction (when an upsert of a new environment overflows `capacity`): among the stored
entries and the new one, drop the one with the smallest key
    (on_frontier, max(regret, 0), step, uid)
i.e. off-frontier entries go first (misleading hints among them), then the lowest positive
regret (the hint makes no difference: already mastered or hopeless), then the oldest, and uid
breaks ties so the rule is deterministic. A new environment that ranks below everything
stored is not kept.

Sampling (designer prompts and replays, `SelfPlayLoop._refresh`): without replacement, with
weight
    SAMPLE_FLOOR + on_frontier + max(regret, 0)
so frontier and high-regret environments dominate; mastered ones and misleading hints still
appear now and then at the floor (they show the designer what is too easy or what misleads).
Entries of the requested categories are drawn first; the rest tops up a sample when those run
out.

`state_dict()` / `load_state_dict()` give and take a JSON-ready dict for checkpoints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from spade_jax.selfplay.prompts import MemoryView

FRONTIER_LOW, FRONTIER_HIGH = 0.2, 0.8
SAMPLE_FLOOR = 0.1


@dataclasses.dataclass
class MemoryEntry:
  uid: str
  source: str
  hint: str
  category: str
  origin: str  # "seed" | "designed"
  step: int  # last step it was played (-1: never)
  win_rate_no_hint: float | None = None
  win_rate_hint: float | None = None
  regret: float | None = None
  max_turns: int | None = None
  times_played: int = 0

  @property
  def hint_hurts(self) -> bool:
    """A negative example: the hint lowers the return."""
    return self.regret is not None and self.regret < 0

  @property
  def on_frontier(self) -> bool:
    p = self.win_rate_no_hint
    return (p is None or FRONTIER_LOW <= p <= FRONTIER_HIGH) and not self.hint_hurts

  @property
  def positive_regret(self) -> float:
    return max(self.regret, 0.0) if self.regret is not None else 0.0

  def keep_key(self) -> tuple:
    """Smaller = evicted first."""
    return (self.on_frontier, self.positive_regret, self.step, self.uid)

  def weight(self) -> float:
    return SAMPLE_FLOOR + float(self.on_frontier) + self.positive_regret

  def view(self) -> MemoryView:
    return MemoryView(self.category, self.source, self.hint, self.win_rate_no_hint,
                      self.win_rate_hint, self.regret)


class EnvMemory:
  """Bounded, frontier-favouring store of environments keyed by uid (rules above)."""

  def __init__(self, capacity: int, entries: Iterable[MemoryEntry] = ()):
    if capacity < 1:
      raise ValueError(f"config.selfplay.memory.capacity={capacity} must be >= 1")
    self.capacity = capacity
    self._entries: dict[str, MemoryEntry] = {}
    for entry in entries:
      self.upsert(entry)

  def __len__(self) -> int:
    return len(self._entries)

  def __contains__(self, uid: str) -> bool:
    return uid in self._entries

  def get(self, uid: str) -> MemoryEntry:
    return self._entries[uid]

  @property
  def entries(self) -> list[MemoryEntry]:
    return list(self._entries.values())

  def upsert(self, entry: MemoryEntry) -> str | None:
    """Stores or replaces `entry`; returns the uid evicted to make room, if any."""
    self._entries[entry.uid] = entry
    if len(self._entries) <= self.capacity:
      return None
    victim = min(self._entries.values(), key=MemoryEntry.keep_key).uid
    del self._entries[victim]
    return victim

  def sample(self, n: int, rng: np.random.Generator, categories: Sequence[str] | None = None,
             exclude: Iterable[str] = ()) -> list[MemoryEntry]:
    """Up to n distinct entries, weighted towards the frontier, preferred categories first."""
    excluded = set(exclude)
    pool = [e for e in self._entries.values() if e.uid not in excluded]
    preferred = [e for e in pool if categories is None or e.category in categories]
    others = [e for e in pool if categories is not None and e.category not in categories]
    picked = _weighted_pick(preferred, n, rng)
    return picked + _weighted_pick(others, n - len(picked), rng)

  def state_dict(self) -> dict:
    return {"capacity": self.capacity,
            "entries": [dataclasses.asdict(e) for e in self._entries.values()]}

  def load_state_dict(self, state: dict) -> None:
    """Replaces capacity and entries with the saved ones."""
    self.capacity = int(state["capacity"])
    self._entries = {e["uid"]: MemoryEntry(**e) for e in state["entries"]}


def _weighted_pick(entries: list[MemoryEntry], n: int,
                   rng: np.random.Generator) -> list[MemoryEntry]:
  if n <= 0 or not entries:
    return []
  entries = sorted(entries, key=lambda e: e.uid)  # independent of insertion order
  weights = np.array([e.weight() for e in entries], dtype=np.float64)
  idx = rng.choice(len(entries), size=min(n, len(entries)), replace=False,
                   p=weights / weights.sum())
  return [entries[i] for i in idx]
