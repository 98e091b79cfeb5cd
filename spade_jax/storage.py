"""Every file a run, evaluation or export reads or writes: local paths and gs:// URLs alike.

Paths are `etils.epath.Path`s, the path type orbax already takes, so a workdir
`gs://bucket/run` and a local `runs/smoke` go through the same calls and nothing local is
ever made for a URL. `gs://` goes through fsspec's gcsfs, set up by `configure_gcs` when a
gs:// path is first used (importing this module changes nothing) and undone by
`restore_gcs`:

  - gcsfs's default class first asks the gRPC storage-control API for each bucket's type
    (zonal / hierarchical), which without that API (an emulator, no credentials) waits out
    a long timeout on every new bucket: gs:// is served by the plain
    `gcsfs.core.GCSFileSystem` instead (and GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false is set
    for anything that imports gcsfs later);
  - with STORAGE_EMULATOR_HOST set (the standard variable, honoured by gcsfs), requests go
    anonymously to the emulator; tensorstore, which orbax writes the arrays with, reads
    TENSORSTORE_GCS_HTTP_URL instead, which defaults to the same URL here.

GCS objects cannot be appended to: `Appender` adds each flushed chunk as an object of its own
and composes it onto the file (one server-side call), so logs and TensorBoard event files
grow without rewriting. `check_writable` checks early that a workdir URL can be written.
`local_copy` fetches a gs:// checkpoint or tokenizer for the readers that need local files.
"""

from __future__ import annotations

import copy
import os
import pathlib
import shutil
import socket
import sys
import threading
import urllib.parse
import uuid
from collections.abc import MutableMapping
from typing import IO, Any

import fsspec
from etils import epath

PathLike = str | os.PathLike[str]
Path = epath.Path
WRITE_CHECK_TIMEOUT_S = 45.0  # a workdir that cannot be written fails within this (then one line)
CACHE_ENV = "SPADE_JAX_CACHE"  # where `local_copy` keeps gs:// checkpoints and tokenizers


class StorageError(OSError):
  """A workdir or file that cannot be reached: one line naming the URL and the cause."""


_GCS_PROTOCOLS = ("gs", "gcs")
_GCS_ENV = ("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "TENSORSTORE_GCS_HTTP_URL")
# fsspec's registry module (the name `fsspec.registry` is its read-only view of the classes).
_FSSPEC_REGISTRY = sys.modules["fsspec.registry"]
# What configure_gcs changed, as it was before (None: not applied): {"env": {name: value or
# None}, "registry": {protocol: class or None}, "conf": fsspec's gs settings or None}.
_gcs_before: dict[str, Any] | None = None
_GCS_LOCK = threading.Lock()


def configure_gcs() -> None:
  """Applies the gs:// settings above (and no cached listings): `path` runs it on the first
  gs:// path; run it again after STORAGE_EMULATOR_HOST changes (it only adds what is
  missing). `restore_gcs` undoes it."""
  global _gcs_before  # pylint: disable=global-statement  (the one record of what to undo)
  with _GCS_LOCK:
    if _gcs_before is None:
      _gcs_before = {
          "env": {name: os.environ.get(name) for name in _GCS_ENV},
          "registry": {p: _FSSPEC_REGISTRY.registry.get(p) for p in _GCS_PROTOCOLS},
          "conf": copy.deepcopy(fsspec.config.conf.get("gs"))}
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # before gcsfs loads
    import gcsfs.core  # pylint: disable=import-outside-toplevel  (only where gs:// is used)
    for protocol in _GCS_PROTOCOLS:
      fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
    # No cached listings: another host's write or rename (a quarantined checkpoint, a new
    # step) must be seen at once, and gcsfs's cache never expires by default.
    conf = fsspec.config.conf.setdefault("gs", {})
    conf.setdefault("use_listings_cache", False)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if emulator and emulator != "default":
      conf.setdefault("token", "anon")
      if "://" not in emulator:
        emulator = f"http://{emulator}"
      os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", emulator)  # orbax's arrays, likewise


def restore_gcs() -> None:
  """Puts back the environment variables, fsspec registrations and fsspec gs settings as
  they were before the first `configure_gcs` (nothing if it has not run)."""
  global _gcs_before  # pylint: disable=global-statement
  with _GCS_LOCK:
    if _gcs_before is None:
      return
    for name, value in _gcs_before["env"].items():
      _put(os.environ, name, value)
    for protocol in _GCS_PROTOCOLS:
      # fsspec has no public way to unregister a class (absent, it imports its default again).
      _put(_FSSPEC_REGISTRY._registry, protocol,  # pylint: disable=protected-access
           _gcs_before["registry"][protocol])
    _put(fsspec.config.conf, "gs", _gcs_before["conf"])
    _gcs_before = None


def _put(mapping: MutableMapping[str, Any], key: str, value: Any) -> None:
  """mapping[key] = value, or no such key when value is None."""
  if value is None:
    mapping.pop(key, None)
  else:
    mapping[key] = value


def is_url(path: PathLike) -> bool:
  """True for gs://... (and other URLs); local paths are everything else."""
  return "://" in os.fspath(path)


def path(p: PathLike) -> epath.Path:
  """The epath of `p`: a URL as it is, a local path with ~ expanded and made absolute."""
  text = os.fspath(p)
  if is_url(text):
    if _gcs_before is None and text.startswith(("gs://", "gcs://")):
      configure_gcs()
    return epath.Path(text)
  return epath.Path(os.path.abspath(os.path.expanduser(text)))


def join(p: PathLike, *parts: str) -> epath.Path:
  return path(p).joinpath(*parts)


def _fs(p: epath.Path):
  """The fsspec filesystem of a URL (gcsfs for gs://)."""
  return fsspec.filesystem(os.fspath(p).split("://", 1)[0])


def makedirs(p: PathLike) -> epath.Path:
  """Creates a local directory (and its parents); a URL needs none (object stores have no
  directories, and gcsfs would create a missing bucket instead of failing)."""
  p = path(p)
  if not is_url(p):
    p.mkdir(parents=True, exist_ok=True)
  return p


def exists(p: PathLike) -> bool:
  return path(p).exists()


def isdir(p: PathLike) -> bool:
  return path(p).is_dir()


def isfile(p: PathLike) -> bool:
  return path(p).is_file()


def size(p: PathLike) -> int | None:
  """The file's length in bytes, None if there is no such file."""
  p = path(p)
  if not p.is_file():
    return None
  return int(p.stat().length)


def listdir(p: PathLike) -> list[str]:
  """The names in a directory (sorted); [] if it does not exist."""
  p = path(p)
  return sorted(c.name for c in p.iterdir()) if p.is_dir() else []


def files(p: PathLike) -> list[epath.Path]:
  """Every file under a directory, at any depth (sorted)."""
  p = path(p)
  if is_url(p):
    protocol = os.fspath(p).split("://", 1)[0]
    return sorted(epath.Path(f"{protocol}://{f}") for f in _fs(p).find(os.fspath(p)))
  return sorted(epath.Path(os.path.join(root, name))  # epath's local rglob refuses "**"
                for root, _, names in os.walk(p) for name in names)


def open_file(p: PathLike, mode: str = "r", encoding: str | None = "utf-8") -> IO[Any]:
  """A file opened for reading or (over)writing ("r", "rb", "w", "wb"); parents are made."""
  if "a" in mode or "+" in mode:
    raise ValueError(f"{p}: mode {mode!r}: use storage.Appender to append")
  p = path(p)
  if "w" in mode:
    makedirs(p.parent)
  return p.open(mode, encoding=None if "b" in mode else encoding)


def read_text(p: PathLike) -> str:
  return path(p).read_text(encoding="utf-8")


def write_text(p: PathLike, text: str) -> None:
  """Writes `text` so that a reader sees the old file or the new one, never a part: a local
  file through a temporary name of this host and process and a rename, an object in one
  upload (GCS replaces objects atomically)."""
  p = path(p)
  makedirs(p.parent)
  if is_url(p):
    p.write_text(text, encoding="utf-8")
    return
  tmp = p.parent / f".{p.name}.{socket.gethostname()}.{os.getpid()}.tmp"
  tmp.write_text(text, encoding="utf-8")
  os.replace(tmp, p)


def rename(src: PathLike, dst: PathLike) -> None:
  """Moves a file or a directory tree (on GCS: copies each object, then deletes it)."""
  src, dst = path(src), path(dst)
  if is_url(src):
    fs = _fs(src)  # copy + delete: gcsfs's mv first tries moveTo, which flat buckets refuse
    fs.copy(os.fspath(src), os.fspath(dst), recursive=True)
    fs.rm(os.fspath(src), recursive=True)
    fs.invalidate_cache()
  else:
    os.replace(src, dst)


def rmtree(p: PathLike) -> None:
  path(p).rmtree(missing_ok=True)


def local_copy(url: PathLike) -> pathlib.Path:
  """A local copy of a gs:// file or directory (every file under it), for readers that need
  local files: a Hugging Face checkpoint (memory-mapped safetensors) or a tokenizer.

  Kept under $SPADE_JAX_CACHE (default ~/.cache/spade_jax) at gs/<bucket>/<path>, so a
  relaunch fetches again only what is missing or of another size. Each file arrives under a
  temporary name and is renamed, so processes sharing the machine never read a part."""
  src = path(url)
  text = os.fspath(src).rstrip("/")
  root = pathlib.Path(os.environ.get(CACHE_ENV) or "~/.cache/spade_jax").expanduser()
  dest = root / text.replace("://", "/", 1)
  if src.is_file():
    pairs = [(src, dest)]
  elif src.is_dir():
    pairs = [(f, dest / os.fspath(f)[len(text) + 1:]) for f in files(src)]
  else:
    raise StorageError(f"{text}: no such file or directory")
  for remote, local in pairs:
    if local.is_file() and local.stat().st_size == size(remote):
      continue
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.parent / f".{local.name}.{socket.gethostname()}.{os.getpid()}.tmp"
    with open_file(remote, "rb", None) as r, open(tmp, "wb") as w:
      shutil.copyfileobj(r, w, 1 << 24)
    os.replace(tmp, local)
  return dest


def tensorstore_kvstore(p: PathLike) -> dict[str, str]:
  """The tensorstore kvstore spec of a directory (gcs driver for gs://, file otherwise)."""
  p = path(p)
  text = os.fspath(p).rstrip("/") + "/"
  if text.startswith("gs://"):
    bucket, _, key = text[len("gs://"):].partition("/")
    return {"driver": "gcs", "bucket": bucket, "path": key}
  return {"driver": "file", "path": text}


class Appender:
  """Appends to one file: `write` buffers, `flush` adds the buffer to the end of the file.

  Local files are opened in append mode; a GCS object is extended by uploading the chunk as
  an object of its own and composing the two (GCS's own append), then deleting the chunk.
  """

  def __init__(self, p: PathLike, binary: bool = False):
    self.path = path(p)
    self._binary = binary
    self._buffer: list[bytes] = []
    self._exists: bool | None = None  # known after the first flush to a URL
    makedirs(self.path.parent)

  def write(self, data: str | bytes) -> None:
    self._buffer.append(data if isinstance(data, bytes) else data.encode("utf-8"))

  def flush(self) -> None:
    if not self._buffer:
      return
    data, self._buffer = b"".join(self._buffer), []
    if not is_url(self.path):
      with self.path.open("ab") as f:
        f.write(data)
      return
    fs, target = _fs(self.path), os.fspath(self.path)
    if self._exists is None:
      self._exists = fs.exists(target)
    if not self._exists:
      fs.pipe_file(target, data)
      self._exists = True
      return
    chunk = f"{target}.append-{uuid.uuid4().hex}"
    fs.pipe_file(chunk, data)
    try:
      fs.merge(target, [target, chunk])
    finally:
      fs.rm_file(chunk)
    fs.invalidate_cache(target)

  def close(self) -> None:
    self.flush()


def check_writable(workdir: PathLike, timeout_s: float = WRITE_CHECK_TIMEOUT_S) -> None:
  """Raises StorageError (one line: the URL and why) unless a file can be written to and
  removed from `workdir` within `timeout_s`; local workdirs are created. Run it before
  anything slow, so an unreachable bucket or missing credentials fail at once."""
  p = path(workdir)
  if not is_url(p):
    try:
      makedirs(p)
    except OSError as e:
      raise StorageError(f"workdir {p}: cannot be created ({e.strerror or e})") from None
    return
  outcome: list[str | None] = []
  worker = threading.Thread(target=lambda: outcome.append(_check_url(p)), daemon=True,
                            name="spade_jax-storage-check")
  worker.start()
  worker.join(timeout_s)
  if not outcome:
    raise StorageError(f"workdir {workdir}: no answer from {_endpoint()} within "
                       f"{timeout_s:.0f} s")
  if outcome[0] is not None:
    raise StorageError(f"workdir {workdir}: {outcome[0]}")


def _endpoint() -> str:
  emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
  return emulator if emulator not in ("", "default") else "https://storage.googleapis.com"


def _check_url(p: epath.Path) -> str | None:
  """None if a small object can be written at `p` and removed, else why not."""
  endpoint = _endpoint()
  if "STORAGE_EMULATOR_HOST" not in os.environ or endpoint.endswith("googleapis.com"):
    try:
      import google.auth  # pylint: disable=import-outside-toplevel  (installed with gcsfs)
      google.auth.default()
    except Exception as e:  # noqa: BLE001 - any failure: no usable credentials
      return (f"no Google Cloud credentials ({_cause(e)}); on a VM give it a service account "
              "with storage access, elsewhere run `gcloud auth application-default login`")
  parsed = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
  port = parsed.port or (443 if parsed.scheme == "https" else 80)
  try:
    socket.create_connection((parsed.hostname, port), timeout=10).close()
  except OSError as e:
    return f"cannot connect to {parsed.hostname}:{port} ({_cause(e)})"
  check_file = os.fspath(p / f".write-check-{socket.gethostname()}-{os.getpid()}")
  try:
    fs = _fs(p)
    fs.pipe_file(check_file, b"spade_jax workdir check\n")
    fs.rm_file(check_file)
  except FileNotFoundError:
    return f"bucket {os.fspath(p).split('/')[2]!r} does not exist"
  except Exception as e:  # noqa: BLE001 - reported as one line
    return f"cannot write there ({_cause(e)})"
  return None


def _cause(error: BaseException) -> str:
  """One line for a storage exception (gcsfs and aiohttp messages can span lines)."""
  text = " ".join(str(error).split()) or type(error).__name__
  if len(text) > 300:
    text = text[:300] + " ..."
  return f"{type(error).__name__}: {text}"
