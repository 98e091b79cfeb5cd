"""A workdir's TensorBoard events, as the launch tests read them (local or gs://)."""

import os
import struct
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from spade_jax import storage


def tensor_events(workdir: str) -> dict[str, list]:
  """Tag -> the TensorEvents of `workdir`/tb, parsed by TensorBoard from local copies of the
  event files read through spade_jax.storage.

  TensorBoard's own gs:// reader takes any failed read for the end of a file and says nothing,
  so a passing fault reads as a run without scalars (the CI run of 44faec2 read an
  uninterrupted run's event file on the emulator back empty, one listing after a test had seen
  it there). A read through spade_jax.storage raises instead.
  """
  with tempfile.TemporaryDirectory() as local:
    for event_file in storage.files(storage.join(workdir, "tb")):
      data = event_file.read_bytes()
      assert data, f"{event_file}: empty"
      assert _whole_records(data), f"{event_file}: {len(data)} bytes end inside a record"
      with open(os.path.join(local, event_file.name), "wb") as f:
        f.write(data)
    acc = EventAccumulator(local, size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: acc.Tensors(tag) for tag in acc.Tags()["tensors"]}


def _whole_records(data: bytes) -> bool:
  """Whether `data` is a whole number of TFRecords (length, its CRC, payload, its CRC): the
  reader stops at a cut record without a word, which would read as steps never written."""
  at = 0
  while at < len(data):
    if at + 12 > len(data):
      return False
    (length,) = struct.unpack("<Q", data[at:at + 8])
    at += 12 + length + 4
  return at == len(data)
