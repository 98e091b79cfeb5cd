"""One run's TensorBoard scalars, read with tensorboard's event-file reader (no TensorFlow):
what learning_report.py draws and matrix_criteria.py and learning_runs.py read."""

from __future__ import annotations

import glob
import math
import os

from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

Series = dict[int, float]  # step -> value
Run = dict[str, Series]  # tag -> series
LAUNCH_TAG = "launch/first_step"  # derived here, not written by the run


def read_run(tb_dir: str) -> Run:
  """Every scalar tag of one run's event files: tag -> {step: value}, NaNs left out, files in
  name (= launch) order, the value written last for a step winning. LAUNCH_TAG holds the
  first step of each launch (each event file), which includes the launch's compilation."""
  run: Run = {}
  for path in sorted(glob.glob(os.path.join(tb_dir, "*tfevents*"))):
    first = None
    for event in event_file_loader.EventFileLoader(path).Load():
      for value in event.summary.value:
        array = tensor_util.make_ndarray(value.tensor) if value.HasField("tensor") else None
        if array is None or array.ndim != 0 or array.dtype.kind != "f":
          continue  # text summaries
        first = event.step if first is None else first
        series = run.setdefault(value.tag, {})
        series.pop(int(event.step), None)
        if math.isfinite(float(array)):
          series[int(event.step)] = float(array)
    if first is not None:
      run.setdefault(LAUNCH_TAG, {})[int(first)] = 1.0
  return {tag: series for tag, series in run.items() if series}
