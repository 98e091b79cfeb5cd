"""Host side of the episode pipes: length-prefixed frames, each call against its own deadline.

One request gets exactly one reply frame (4-byte big-endian length, then JSON). Writes
and reads never block and never buffer more than the reply cap, and every call of a batch
waits only on its own pipes in one poll loop: a stuck, flooding or dead episode process,
or one that stops reading its request pipe, cannot stall the trainer or eat the time of
the other episodes of its batch.
"""

from __future__ import annotations

import os
import select
import struct
import time
from collections.abc import Callable, Hashable, Iterator

HEADER = struct.Struct(">I")
OK, TIMEOUT, CLOSED, TOO_BIG = "ok", "timeout", "closed", "too_big"


class Call:
  """One request frame on its way to an episode process and the reply frame coming back.

  `req` and `resp` are the host's non-blocking ends of the episode's two pipes.
  """

  def __init__(self, req: int, resp: int, payload: bytes):
    self.req, self.resp = req, resp
    self.unsent = memoryview(HEADER.pack(len(payload)) + payload)
    self.received = bytearray()

  def send(self) -> str | None:
    """Writes what the pipe takes now; CLOSED when its reader is gone, else None."""
    try:
      while self.unsent:
        self.unsent = self.unsent[os.write(self.req, self.unsent):]
    except BlockingIOError:
      pass
    except OSError:
      return CLOSED
    return None

  def receive(self, max_bytes: int) -> tuple[str | None, bytes]:
    """Appends what is readable; (status, payload) once the frame is complete or broken."""
    try:
      chunk = os.read(self.resp, 1 << 16)
    except BlockingIOError:
      return None, b""
    except OSError:
      return CLOSED, b""
    if not chunk:
      return CLOSED, b""
    buf = self.received
    buf += chunk
    if len(buf) < HEADER.size:
      return None, b""
    size = HEADER.unpack_from(buf)[0]
    if size > max_bytes:
      return TOO_BIG, b""
    if len(buf) < HEADER.size + size:
      return None, b""
    return OK, bytes(buf[HEADER.size:HEADER.size + size])


def exchange(calls: dict[Hashable, Call], timeout_s: float, max_bytes: int,
             on_poll: Callable[[], None] | None = None, poll_s: float = 0.05
             ) -> Iterator[tuple[Hashable, str, bytes]]:
  """Sends what is left of each call's request and reads its reply, within `timeout_s`.

  Yields (key, status, payload) as each call ends, with status OK, TIMEOUT, CLOSED (the
  process closed its pipe or died) or TOO_BIG (the reply announces more than max_bytes).
  Every call has its own deadline, `timeout_s` from now, and nothing another call does
  uses any of it. The loop polls at least once, so a reply that is already waiting is read
  even when the deadline has passed (a host that was descheduled meanwhile).
  `on_poll`, when given, runs after every poll, and a poll waits at most `poll_s` (the pool
  checks its memory cap there; a process it kills ends its call as CLOSED).
  """
  deadline = time.monotonic() + timeout_s
  pending, owners = {}, {}
  poller = select.poll()
  for key, call in calls.items():
    if call.send() == CLOSED:
      yield key, CLOSED, b""
      continue
    pending[key] = call
    _watch(poller, owners, call.resp, select.POLLIN, key)
    if call.unsent:
      _watch(poller, owners, call.req, select.POLLOUT, key)
  while pending:
    wait_s = max(0.0, deadline - time.monotonic())
    ready = poller.poll((wait_s if on_poll is None else min(wait_s, poll_s)) * 1000)
    if on_poll is not None:
      on_poll()
    for fd, _ in ready:
      key = owners.get(fd)
      if key is None:  # its call ended earlier in this round
        continue
      call = pending[key]
      status, payload = (call.send(), b"") if fd == call.req else call.receive(max_bytes)
      if fd == call.req and not call.unsent:
        _forget(poller, owners, fd)
      if status is not None:
        _end(poller, owners, call)
        del pending[key]
        yield key, status, payload
    if time.monotonic() >= deadline:
      for key, call in pending.items():
        _end(poller, owners, call)
        yield key, TIMEOUT, b""
      return


def _watch(poller: select.poll, owners: dict[int, Hashable], fd: int, event: int,
           key: Hashable) -> None:
  poller.register(fd, event)
  owners[fd] = key


def _end(poller: select.poll, owners: dict[int, Hashable], call: Call) -> None:
  for fd in (call.req, call.resp):
    if fd in owners:
      _forget(poller, owners, fd)


def _forget(poller: select.poll, owners: dict[int, Hashable], fd: int) -> None:
  poller.unregister(fd)
  del owners[fd]
