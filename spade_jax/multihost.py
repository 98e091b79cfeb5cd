"""Host-side data exchange between the processes of a jax.distributed run, and lost peers.

`JaxExchange.all_gather(value)` gives every process every process's picklable `value`:
small host objects, such as the sandbox results that `sandbox.split.SplitPool` shares. It
is built from public JAX only: each value is pickled to bytes, the byte counts are gathered
(`multihost_utils.process_allgather`), then every process's bytes, zero-padded to a common
power-of-two width so that a handful of shapes (one compile each) serve every call. Every
process makes the same calls in the same order (they run the same loop).

A process that dies (killed, its host gone) makes the next collective of the others fail
at once (a closed connection), or, where nothing talks to it, the coordination service
declares it dead after the heartbeat timeout. `lost_peer(err, peers)` turns such a failure
into `PeerLost`, whose one line names the lost process when it can be found.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

EXIT_PEER_LOST = 3  # launch/tpu_run.py's exit code when another process of the run is lost
_MIN_WIDTH = 256  # bytes: the smallest padded width (one compile serves every small value)
# Words in the errors a collective, the coordination service or gloo give for a dead peer.
_PEER_ERRORS = ("connection closed by peer", "connection reset", "heartbeat", "unavailable",
                "coordination service", "broken pipe", "socket closed", "gloo")


class PeerLost(RuntimeError):
  """Another process of the run is gone; the message names it where it can."""


class JaxExchange:
  """`sandbox.split.Exchange` over jax.distributed (needs `jax.distributed.initialize`).

  Construction is itself a round: every process learns each one's host name and pid
  (`peers`), which `lost_peer` uses to name a process that is gone, and a `PeerWatch` starts
  (`watch_peers=False` leaves it out). `close(finished=True)` when the run ended as it
  should (done or preempted), so that the others do not take this process's exit for a loss.
  """

  def __init__(self, watch_peers: bool = True):
    if not jax.distributed.is_initialized():
      raise RuntimeError("JaxExchange needs jax.distributed.initialize() first")
    self.rank, self.size = jax.process_index(), jax.process_count()
    self.peers: list[tuple[str, int]] = self.all_gather((socket.gethostname(), os.getpid()))
    self.watch = PeerWatch(self) if watch_peers else None

  def close(self, finished: bool) -> None:
    if self.watch is not None:
      self.watch.close(finished)

  def all_gather(self, value: Any) -> list[Any]:
    data = np.frombuffer(pickle.dumps(value), np.uint8)
    sizes = multihost_utils.process_allgather(np.asarray(data.size, np.int64))  # [P]
    width = max(_MIN_WIDTH, 1 << (int(sizes.max()) - 1).bit_length())
    padded = np.zeros(width, np.uint8)
    padded[:data.size] = data
    rows = multihost_utils.process_allgather(padded)  # [P, width]
    return [pickle.loads(rows[r, :int(sizes[r])].tobytes()) for r in range(self.size)]


class PeerWatch:
  """Ends this process at once, with one line, when another process of the run dies.

  Every process listens on a TCP port and connects to every other one's, saying its rank.
  The kernel closes a dead process's sockets, so the others read end-of-file within
  milliseconds, wherever their main thread is blocked (a collective, a barrier, the key-value
  store, which would otherwise wait for the heartbeat timeout and then abort with a stack
  dump). A process that ends as it should says "bye" first. A host that vanishes without
  closing its sockets is left to the coordination service's heartbeat timeout. On a loss
  the process prints the line and exits with EXIT_PEER_LOST; its sandbox workers die with it
  (they are bound to it by PR_SET_PDEATHSIG).
  """

  def __init__(self, exchange: JaxExchange):
    self._exchange, self._closing = exchange, False
    self._listener = socket.create_server(("", 0), backlog=max(1, exchange.size))
    table = exchange.all_gather((_local_address(), self._listener.getsockname()[1]))
    threading.Thread(target=self._accept, daemon=True, name="spade-peer-accept").start()
    self._out = []
    for rank, (host, port) in enumerate(table):
      if rank != exchange.rank:
        try:
          conn = socket.create_connection((host, port), timeout=30)
          conn.sendall(f"{exchange.rank}\n".encode())
          self._out.append(conn)
        except OSError:  # unreachable: that peer is watched by the heartbeat alone
          pass

  def _accept(self) -> None:
    while not self._closing:
      try:
        conn, _ = self._listener.accept()
      except OSError:
        return
      threading.Thread(target=self._read, args=(conn,), daemon=True,
                       name="spade-peer-watch").start()

  def _read(self, conn: socket.socket) -> None:
    data = b""
    while b"bye" not in data:
      try:
        chunk = conn.recv(64)
      except OSError:
        chunk = b""
      if not chunk:
        break
      data += chunk
    if b"bye" in data or self._closing:
      return
    rank = int(data.split(b"\n", 1)[0] or -1)
    host, pid = self._exchange.peers[rank] if 0 <= rank < len(self._exchange.peers) else ("?", 0)
    me = f"process {self._exchange.rank}/{self._exchange.size}"
    sys.stdout.flush()
    print(f"error: {me}: lost process {rank} (pid {pid} on {host}): it ended without finishing "
          "the run (killed, its host gone, or stopped by an error: see its log); stopping the "
          "run", file=sys.stderr, flush=True)
    os._exit(EXIT_PEER_LOST)  # pylint: disable=protected-access

  def close(self, finished: bool) -> None:
    """Stops watching; `finished` tells the others this process ends as it should."""
    self._closing = True
    for conn in self._out:
      try:
        if finished:
          conn.sendall(b"bye\n")
        conn.close()
      except OSError:
        pass
    self._listener.close()


def _local_address() -> str:
  """This host's address as the others reach it: the interface that routes to the
  coordinator (JAX_COORDINATOR_ADDRESS), else the host name's address."""
  coordinator = os.environ.get("JAX_COORDINATOR_ADDRESS", "").rsplit(":", 1)[0].strip("[]")
  if coordinator:
    try:
      with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((coordinator, 9))  # UDP: no packet is sent
        return probe.getsockname()[0]
    except OSError:
      pass
  return socket.gethostbyname(socket.gethostname())


def lost_peer(err: BaseException, peers: list[tuple[str, int]] | None) -> PeerLost | None:
  """`PeerLost` naming the lost process when `err` is a collective failing for a dead peer
  (None when it is not: a single process, or an error of another kind)."""
  if jax.process_count() == 1:
    return None
  text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
  gone = [r for r, (host, pid) in enumerate(peers or [])
          if r != jax.process_index() and host == socket.gethostname() and not _alive(pid)]
  if not gone and not (isinstance(err, jax.errors.JaxRuntimeError)
                       and any(word in str(err).lower() for word in _PEER_ERRORS)):
    return None
  me = f"process {jax.process_index()}/{jax.process_count()}"
  if gone:
    who = ", ".join(f"process {r} (pid {peers[r][1]})" for r in gone)
    return PeerLost(f"{me}: lost {who}, which is no longer running; stopping the run "
                    f"({type(err).__name__}: {text[:300]})")
  return PeerLost(f"{me}: lost contact with another process of the run (on another host; "
                  f"its own log says why); stopping the run ({type(err).__name__}: "
                  f"{text[:300]})")


def _alive(pid: int) -> bool:
  """Whether process `pid` of this host runs (a zombie, killed but not yet reaped, does not)."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except (OSError, IndexError):
    return False
