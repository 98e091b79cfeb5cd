"""A TensorBoard event writer for scalars and markdown text, without TensorFlow.

`tensorboard.summary.Writer` writes scalars with no TensorFlow installed but has no text
summaries, so both kinds go through tensorboard's own `EventFileWriter` here: scalars with
the scalars plugin's metadata (as `Writer.add_scalar` does), text as a string tensor with
the text plugin's metadata, which TensorBoard renders as markdown.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util


class SummaryWriter:
  """Appends events to a new event file under `logdir`."""

  def __init__(self, logdir: str | os.PathLike[str]):
    os.makedirs(logdir, exist_ok=True)
    self._writer = EventFileWriter(str(logdir))
    self._scalar_meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=scalar_metadata.PLUGIN_NAME),
        data_class=summary_pb2.DataClass.DATA_CLASS_SCALAR)
    self._text_meta = text_metadata.create_summary_metadata(display_name=None, description="")

  def _emit(self, tag: str, tensor, metadata, step: int) -> None:
    event = event_pb2.Event(wall_time=time.time(), step=int(step))
    event.summary.value.add(tag=tag, tensor=tensor, metadata=metadata)
    self._writer.add_event(event)

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
