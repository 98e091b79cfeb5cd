"""`SplitPool`: the sandbox work of one batched call split across the processes of a run.

On several hosts every process runs the same self-play loop on the same data, so every
process makes the same sequence of pool calls with the same arguments. Instead of each one
running every environment, `SplitPool` runs only this process's share of each call on its
own pool and exchanges the results, so every process returns the same full list and builds
the same training batch. The split is deterministic and balanced: the items of a `validate`
or `reset` call are dealt round-robin, each call going on where the previous one stopped
(so odd counts even out over calls), and an episode's later `step`, `oracle_actions` and
`close_episodes` go to the process that reset it (its interpreter lives there).

The exchange is injected (`Exchange`: `rank`, `size`, `all_gather`), so this module stays
plain Python: the composition root passes a jax.distributed-backed one on several hosts
(spade_jax/multihost.py) and `LocalExchange` on one. Records cross processes pickled; they
are host-side objects the sandbox already coerced (never environment code).
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Sequence
from typing import Any, Protocol, TypeVar

from spade_jax.sandbox.api import EnvPool, EnvStep, OracleActions, ValidationResult

T = TypeVar("T")


class Exchange(Protocol):
  rank: int  # this process's index
  size: int  # number of processes

  def all_gather(self, value: Any) -> list[Any]:
    """Every process's `value` (picklable), in rank order; every process must call it."""


class LocalExchange:
  """One process: nothing to exchange."""

  rank, size = 0, 1

  def all_gather(self, value: Any) -> list[Any]:
    return [value]


class SplitPool:
  """An EnvPool that runs this process's share of every call on `pool` (see module doc)."""

  def __init__(self, pool: EnvPool, exchange: Exchange):
    self.pool, self.exchange = pool, exchange
    self._owner: dict[Hashable, int] = {}
    self._dealer = 0  # the process that takes the first item of the next dealt call
    # What this process's own pool ran: the split's bookkeeping, shown at the end of a run.
    self.local_counts: collections.Counter = collections.Counter()

  def validate(self, sources: Sequence[str]) -> list[ValidationResult]:
    mine = [i for i, owner in enumerate(self._deal(len(sources))) if owner == self.exchange.rank]
    self.local_counts["validate"] += len(mine)
    return self._merged(len(sources), mine, lambda: self.pool.validate([sources[i]
                                                                          for i in mine]))

  def reset(self, episodes: Sequence[tuple[Hashable, str, int]]) -> list[EnvStep]:
    owners = self._deal(len(episodes))
    self._owner.update((eid, owner) for (eid, _, _), owner in zip(episodes, owners, strict=True))
    mine = [i for i, owner in enumerate(owners) if owner == self.exchange.rank]
    self.local_counts["reset"] += len(mine)
    records = self._merged(len(episodes), mine,
                           lambda: self.pool.reset([episodes[i] for i in mine]))
    self._forget(eid for (eid, _, _), rec in zip(episodes, records, strict=True) if rec.done)
    return records

  def step(self, actions: Sequence[tuple[Hashable, str]]) -> list[EnvStep]:
    self._check_owned([eid for eid, _ in actions])
    mine = [i for i, (eid, _) in enumerate(actions) if self._owner[eid] == self.exchange.rank]
    self.local_counts["step"] += len(mine)
    records = self._merged(len(actions), mine, lambda: self.pool.step([actions[i]
                                                                        for i in mine]))
    self._forget(eid for (eid, _), rec in zip(actions, records, strict=True) if rec.done)
    return records

  def oracle_actions(self, episode_ids: Sequence[Hashable]) -> list[OracleActions]:
    """oracle_actions() of live episodes, each asked of the process that reset it."""
    self._check_owned(episode_ids)
    mine = [i for i, eid in enumerate(episode_ids) if self._owner[eid] == self.exchange.rank]
    return self._merged(len(episode_ids), mine,
                        lambda: self.pool.oracle_actions([episode_ids[i] for i in mine]))

  def close_episodes(self, episode_ids: Sequence[Hashable]) -> None:
    mine = [eid for eid in episode_ids if self._owner.get(eid) == self.exchange.rank]
    self._forget(episode_ids)
    if mine:
      self.pool.close_episodes(mine)

  def close(self) -> None:
    self.pool.close()

  def _deal(self, n: int) -> list[int]:
    """The process of each of n items (the same list on every process)."""
    owners = [(self._dealer + i) % self.exchange.size for i in range(n)]
    self._dealer = (self._dealer + n) % self.exchange.size
    return owners

  def _merged(self, n: int, mine: list[int], run) -> list[T]:
    """Runs this process's items, gathers everyone's, returns all n results in order."""
    local = run() if mine else []
    if len(local) != len(mine):
      raise RuntimeError(f"the pool returned {len(local)} records for {len(mine)} items")
    out: list[Any] = [None] * n
    for indices, records in self.exchange.all_gather((mine, local)):
      for i, record in zip(indices, records, strict=True):
        out[i] = record
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:
      raise RuntimeError(f"no process ran items {missing[:5]} of a call of {n}")
    return out

  def _check_owned(self, episode_ids: Sequence[Hashable]) -> None:
    unknown = [eid for eid in episode_ids if eid not in self._owner]
    if unknown:
      raise KeyError(f"episodes that were never reset (or are done): {unknown[:5]}")

  def _forget(self, episode_ids) -> None:
    for eid in list(episode_ids):
      self._owner.pop(eid, None)
