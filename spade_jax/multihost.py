"""Host-side data exchange between the processes of a jax.distributed run.

`JaxExchange.all_gather(value)` gives every process every process's picklable `value`
through the key-value store of the jax.distributed coordination service (the one orbax
also uses for its barriers): small host objects, such as the sandbox results that
`sandbox.split.SplitPool` shares, without a device computation or a compile per shape.
Each call is one round with its own keys; every process makes the same calls in the same
order (they run the same loop), and a process drops its previous round's key once the
current round shows that everyone has read it.
"""

from __future__ import annotations

import pickle
from typing import Any

import jax
from jax._src import distributed  # the coordination client (no public accessor yet)

TIMEOUT_MS = 30 * 60 * 1000  # a round waits this long for the slowest process


class JaxExchange:
  """`sandbox.split.Exchange` over jax.distributed (needs `jax.distributed.initialize`)."""

  def __init__(self, prefix: str = "spade_jax/exchange"):
    self.client = distributed.global_state.client
    if self.client is None:
      raise RuntimeError("JaxExchange needs jax.distributed.initialize() first")
    self.rank, self.size = jax.process_index(), jax.process_count()
    self.prefix = prefix
    self._round = 0

  def _key(self, round_: int, rank: int) -> str:
    return f"{self.prefix}/{round_}/{rank}"

  def all_gather(self, value: Any) -> list[Any]:
    self._round += 1
    self.client.key_value_set_bytes(self._key(self._round, self.rank), pickle.dumps(value))
    out = [pickle.loads(self.client.blocking_key_value_get_bytes(self._key(self._round, r),
                                                                 TIMEOUT_MS))
           for r in range(self.size)]
    # Everyone wrote this round, so everyone finished reading the previous one.
    if self._round > 1:
      self.client.key_value_delete(self._key(self._round - 1, self.rank))
    return out
