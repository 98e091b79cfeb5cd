"""The host exchange of a multi-process run: `multihost.JaxExchange` against the key-value store.

    python bench/host_exchange.py [--rounds 200] [--size 2000]

Starts two processes joined by jax.distributed on the loopback (4 fake CPU devices each, as
tests/launch/test_multiprocess_e2e.py), and times `all_gather` rounds of a pickled value
of about `--size` bytes (a list of sandbox-result-sized dicts) two ways: `JaxExchange`
(public JAX: two `multihost_utils.process_allgather` collectives of the byte count and the
padded bytes) and the coordination service's key-value store (the private
`jax._src.distributed` client that JaxExchange used before: a set, a blocking get per process
and a delete). The first 10 rounds (compiles, connections) are not timed. Prints ONE JSON
line from process 0: median and p90 milliseconds per round of each.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import subprocess
import sys
import time

WARMUP = 10


def _kv_all_gather(client, rank: int, size: int, round_: int, value) -> list:
  client.key_value_set_bytes(f"bench/{round_}/{rank}", pickle.dumps(value))
  out = [pickle.loads(client.blocking_key_value_get_bytes(f"bench/{round_}/{r}", 60_000))
         for r in range(size)]
  if round_ > 1:
    client.key_value_delete(f"bench/{round_ - 1}/{rank}")
  return out


def _timed(fn, rounds: int) -> dict[str, float]:
  times = []
  for i in range(WARMUP + rounds):
    start = time.perf_counter()
    fn(i + 1)
    if i >= WARMUP:
      times.append((time.perf_counter() - start) * 1e3)
  times.sort()
  return {"median_ms": round(times[len(times) // 2], 3),
          "p90_ms": round(times[int(len(times) * 0.9)], 3)}


def worker(rank: int, port: int, rounds: int, size: int) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  from jax._src import distributed  # pylint: disable=import-outside-toplevel

  from spade_jax.multihost import JaxExchange  # pylint: disable=import-outside-toplevel
  jax.distributed.initialize(f"127.0.0.1:{port}", 2, rank)
  value = [{"reward": 0.5, "observation": f"{i:060d}", "rank": rank}
           for i in range(max(1, size // 100))]
  exchange = JaxExchange(watch_peers=False)  # the bench ends without a proper close
  client = distributed.global_state.client
  result = {"bench": "host_exchange", "value_bytes": len(pickle.dumps(value)),
            "rounds": rounds, "process_allgather": _timed(lambda _: exchange.all_gather(value),
                                                          rounds),
            "kv_store": _timed(lambda i: _kv_all_gather(client, rank, 2, i, value), rounds)}
  if rank == 0:
    print(json.dumps(result), flush=True)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--rounds", type=int, default=200)
  parser.add_argument("--size", type=int, default=2000)
  parser.add_argument("--rank", type=int, default=None)
  parser.add_argument("--port", type=int, default=0)
  args = parser.parse_args()
  if args.rank is not None:
    worker(args.rank, args.port, args.rounds, args.size)
    return
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=4")
  procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", str(port),
                             "--rounds", str(args.rounds), "--size", str(args.size)], env=env)
           for r in range(2)]
  sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
  main()
