"""Streaming reader and writer for (sharded) safetensors checkpoints, numpy only.

The format is an 8-byte little-endian header length, a JSON header mapping each tensor name to
{dtype, shape, data_offsets}, then the raw bytes. Reading it directly (instead of through
`safetensors.safe_open(framework="numpy")`) gives bfloat16 via ml_dtypes without torch, reads
one tensor at a time into a buffer of exactly its size, and lets every header be checked against
the file size before any weight is read, so a truncated shard fails up front with its name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping

import ml_dtypes
import numpy as np

from spade_jax.model.hf_config import (
  CheckpointFileNotFoundError,
  CorruptFileError,
  MissingTensorError,
  read_json,
)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_MAX_HEADER = 100 << 20
_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32), "I16": np.dtype(np.int16), "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_)}
_CODES = {v: k for k, v in _DTYPES.items()}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  file: pathlib.Path
  dtype: np.dtype
  shape: tuple[int, ...]
  start: int  # absolute byte offset in `file`
  nbytes: int


def read_header(path: pathlib.Path) -> dict[str, TensorInfo]:
  """Parses and validates one safetensors header against the file's size."""
  if not path.is_file():
    raise CheckpointFileNotFoundError(f"{path}: safetensors file not found")
  size = path.stat().st_size
  with path.open("rb") as f:
    prefix = f.read(8)
    if len(prefix) < 8:
      raise CorruptFileError(f"{path}: {size} bytes, shorter than the 8-byte header length")
    header_len = int.from_bytes(prefix, "little")
    if header_len > min(size - 8, _MAX_HEADER):
      raise CorruptFileError(f"{path}: header claims {header_len} bytes but the file has "
                             f"{size - 8} after the length field (truncated or not safetensors)")
    try:
      header = json.loads(f.read(header_len))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise CorruptFileError(f"{path}: header is not valid JSON ({e})") from e
  if not isinstance(header, dict):
    raise CorruptFileError(f"{path}: header is not a JSON object")
  base, data_len = 8 + header_len, size - 8 - header_len
  tensors = {}
  for name, entry in header.items():
    if name == "__metadata__":
      continue
    try:
      dtype, shape = _DTYPES[entry["dtype"]], tuple(int(d) for d in entry["shape"])
      begin, end = (int(x) for x in entry["data_offsets"])
    except (KeyError, TypeError, ValueError) as e:
      raise CorruptFileError(f"{path}: tensor {name!r} has a malformed header entry "
                             f"{entry!r}") from e
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes or begin < 0:
      raise CorruptFileError(f"{path}: tensor {name!r} spans bytes [{begin}, {end}) but "
                             f"{entry['dtype']}{list(shape)} needs {nbytes}")
    if end > data_len:
      raise CorruptFileError(f"{path}: tensor {name!r} needs data bytes up to {end} but the file "
                             f"holds {data_len} (truncated)")
    tensors[name] = TensorInfo(path, dtype, shape, base + begin, end - begin)
  return tensors


class CheckpointReader:
  """All tensors of a checkpoint directory (one file or shards + index), read on demand."""

  def __init__(self, directory: pathlib.Path):
    self.directory = directory
    index_path, single = directory / INDEX_FILE, directory / SINGLE_FILE
    if index_path.is_file():
      weight_map = read_json(index_path).get("weight_map")
      if not isinstance(weight_map, dict) or not all(
          isinstance(v, str) for v in weight_map.values()):
        raise CorruptFileError(f"{index_path}: field 'weight_map' must map tensor names to "
                               "file names")
      self.files = sorted(set(weight_map.values()))
      self._tensors: dict[str, TensorInfo] = {}
      for file in self.files:
        if pathlib.Path(file).name != file:
          raise CorruptFileError(f"{index_path}: shard name {file!r} is not a plain file name")
        self._tensors.update(read_header(directory / file))
      for name, file in weight_map.items():
        if name not in self._tensors or self._tensors[name].file.name != file:
          raise CorruptFileError(f"{index_path}: lists tensor {name!r} in {file}, which does "
                                 "not hold it")
    elif single.is_file():
      self.files = [SINGLE_FILE]
      self._tensors = read_header(single)
    else:
      raise CheckpointFileNotFoundError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE}")

  def names(self) -> set[str]:
    return set(self._tensors)

  def info(self, name: str) -> TensorInfo:
    if name not in self._tensors:
      raise MissingTensorError(f"{self.directory}: tensor {name!r} is in none of {self.files}")
    return self._tensors[name]

  def read(self, name: str) -> np.ndarray:
    """The tensor as a fresh numpy array (exactly its own size in memory)."""
    info = self.info(name)
    out = np.empty(info.shape, info.dtype)
    with info.file.open("rb") as f:
      f.seek(info.start)
      got = f.readinto(out.reshape(-1).view(np.uint8))
    if got != info.nbytes:
      raise CorruptFileError(f"{info.file}: tensor {name!r}: read {got} of {info.nbytes} bytes")
    return out


@dataclasses.dataclass(frozen=True)
class PendingTensor:
  """A tensor to write: its metadata now, its value (a numpy array) only when `fetch` runs."""
  name: str
  shape: tuple[int, ...]
  dtype: np.dtype
  fetch: Callable[[], np.ndarray]

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize


def write_file(path: pathlib.Path, tensors: Iterable[PendingTensor],
               metadata: Mapping[str, str]) -> None:
  """Writes one safetensors file, fetching tensor values one at a time (atomic rename)."""
  tensors = list(tensors)
  header: dict[str, object] = {"__metadata__": dict(metadata)}
  offset = 0
  for t in tensors:
    header[t.name] = {"dtype": _CODES[np.dtype(t.dtype)], "shape": list(t.shape),
                      "data_offsets": [offset, offset + t.nbytes]}
    offset += t.nbytes
  raw = json.dumps(header, separators=(",", ":")).encode()
  raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
  tmp = path.with_name(path.name + ".tmp")
  with tmp.open("wb") as f:
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for t in tensors:
      value = np.ascontiguousarray(t.fetch())
      if value.shape != t.shape or value.dtype != t.dtype:
        raise ValueError(f"{t.name}: fetched {value.dtype}{value.shape}, declared "
                         f"{t.dtype}{t.shape}")
      f.write(value.reshape(-1).view(np.uint8).data)
  os.replace(tmp, path)


def write_checkpoint(directory: pathlib.Path, tensors: list[PendingTensor],
                     max_shard_bytes: int) -> list[str]:
  """Writes model.safetensors, or shards + index when the total exceeds `max_shard_bytes`."""
  metadata = {"format": "pt"}  # transformers refuses files without a known format tag
  total = sum(t.nbytes for t in tensors)
  for stale in [*directory.glob("model*.safetensors"), directory / INDEX_FILE]:
    stale.unlink(missing_ok=True)
  if total <= max_shard_bytes:
    write_file(directory / SINGLE_FILE, tensors, metadata)
    return [SINGLE_FILE]
  shards: list[list[PendingTensor]] = [[]]
  size = 0
  for t in tensors:
    if shards[-1] and size + t.nbytes > max_shard_bytes:
      shards.append([])
      size = 0
    shards[-1].append(t)
    size += t.nbytes
  names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
  for name, shard in zip(names, shards, strict=True):
    write_file(directory / name, shard, metadata)
  index = {"metadata": {"total_size": total},
           "weight_map": {t.name: name for name, shard in zip(names, shards, strict=True)
                          for t in shard}}
  (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
  return names
