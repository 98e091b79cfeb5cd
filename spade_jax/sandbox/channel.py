"""Host side of the episode pipes: length-prefixed frames with wall-clock deadlines.

One request gets exactly one reply frame (4-byte big-endian length, then JSON). Reads
and writes never block past a deadline and never buffer more than the reply cap, so a
stuck, flooding or dead episode process cannot stall or exhaust the trainer.
"""

from __future__ import annotations

import os
import select
import struct
import time
from collections.abc import Hashable

HEADER = struct.Struct(">I")
OK, TIMEOUT, CLOSED, TOO_BIG = "ok", "timeout", "closed", "too_big"


def write_frame(fd: int, payload: bytes, deadline: float) -> str:
  """Writes one frame to a non-blocking fd; returns OK, TIMEOUT or CLOSED."""
  data = memoryview(HEADER.pack(len(payload)) + payload)
  poller = None
  while data:
    try:
      data = data[os.write(fd, data):]
      continue
    except BlockingIOError:
      pass
    except OSError:
      return CLOSED
    if poller is None:
      poller = select.poll()
      poller.register(fd, select.POLLOUT)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
      return TIMEOUT
    poller.poll(remaining * 1000)
  return OK


def collect(waiting: dict[int, Hashable], deadline: float, max_bytes: int
            ) -> dict[Hashable, tuple[str, bytes]]:
  """Reads one reply frame from each fd (fd -> key) before the deadline.

  Returns key -> (status, payload) with status OK, TIMEOUT, CLOSED (end of file: the
  process died) or TOO_BIG (the reply announces more than max_bytes).
  """
  results = {}
  buffers = {fd: bytearray() for fd in waiting}
  poller = select.poll()
  for fd in waiting:
    poller.register(fd, select.POLLIN)
  while waiting:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
      break
    for fd, _ in poller.poll(remaining * 1000):
      status, payload = _read_some(fd, buffers[fd], max_bytes)
      if status is not None:
        results[waiting.pop(fd)] = (status, payload)
        poller.unregister(fd)
  results.update({key: (TIMEOUT, b"") for key in waiting.values()})
  return results


def _read_some(fd: int, buf: bytearray, max_bytes: int) -> tuple[str | None, bytes]:
  """Appends what is readable; (status, payload) once the frame is complete or broken."""
  try:
    chunk = os.read(fd, 1 << 16)
  except BlockingIOError:
    return None, b""
  except OSError:
    return CLOSED, b""
  if not chunk:
    return CLOSED, b""
  buf += chunk
  if len(buf) < HEADER.size:
    return None, b""
  size = HEADER.unpack_from(buf)[0]
  if size > max_bytes:
    return TOO_BIG, b""
  if len(buf) < HEADER.size + size:
    return None, b""
  payload = bytes(buf[HEADER.size:HEADER.size + size])
  del buf[:]
  return OK, payload
