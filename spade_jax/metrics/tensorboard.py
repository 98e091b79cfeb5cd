"""A TensorBoard event writer for scalars and markdown text, without TensorFlow.

`tensorboard.summary.Writer` writes scalars with no TensorFlow installed but has no text
summaries, so both kinds go through tensorboard's own `EventFileWriter` here: scalars with
the scalars plugin's metadata (as `Writer.add_scalar` does), text as a string tensor with
the text plugin's metadata, which TensorBoard renders as markdown. The event file is written
through `spade_jax.storage` (a local directory or gs://): tensorboard's own file layer opens
gs:// through fsspec in append mode, which GCS does not have, so each flush would replace the
file instead of extending it.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Mapping

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from spade_jax import storage

_file_ids = itertools.count()  # one event file per writer, as tensorboard's writer names them


class SummaryWriter:
  """Appends events to a new event file under `logdir`
  (events.out.tfevents.<time>.<host>.<pid>.<n>, the name tensorboard's own writer gives)."""

  def __init__(self, logdir: str | os.PathLike[str]):
    self.path = storage.join(logdir, f"events.out.tfevents.{int(time.time()):010d}."
                             f"{socket.gethostname()}.{os.getpid()}.{next(_file_ids)}")
    self._writer = RecordWriter(storage.Appender(self.path))
    self._writer.write(event_pb2.Event(wall_time=time.time(),
                                       file_version="brain.Event:2").SerializeToString())
    self._writer.flush()
    self._scalar_meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=scalar_metadata.PLUGIN_NAME),
        data_class=summary_pb2.DataClass.DATA_CLASS_SCALAR)
    self._text_meta = text_metadata.create_summary_metadata(display_name=None, description="")

  def _emit(self, tag: str, tensor, metadata, step: int) -> None:
    event = event_pb2.Event(wall_time=time.time(), step=int(step))
    event.summary.value.add(tag=tag, tensor=tensor, metadata=metadata)
    self._writer.write(event.SerializeToString())

  def scalar(self, tag: str, value: float, step: int) -> None:
    self._emit(tag, tensor_util.make_tensor_proto(np.float32(value)), self._scalar_meta, step)

  def scalars(self, values: Mapping[str, float], step: int) -> None:
    for tag, value in values.items():
      self.scalar(tag, value, step)

  def text(self, tag: str, markdown: str, step: int) -> None:
    tensor = tensor_util.make_tensor_proto(np.array(markdown.encode("utf-8"), dtype=object))
    self._emit(tag, tensor, self._text_meta, step)

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()
