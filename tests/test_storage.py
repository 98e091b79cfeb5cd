"""The storage layer (spade_jax/storage.py): every workdir path goes through it, and gs://
works against a real GCS JSON API on the loopback (the `gcs` fixture's emulator)."""

import ast
import builtins
import io
import os
import socket
import subprocess
import sys
import time

import fsspec
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorstore as ts
from flax import nnx
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from spade_jax import config_schema, storage
from spade_jax.metrics.tensorboard import SummaryWriter
from spade_jax.rl.checkpoint import CheckpointManager, abstract_like
from tests.layering import PACKAGE_ROOT, imports_of

# Every module a workdir (or a path in it) travels through, relative to the repository.
WORKDIR_MODULES = (
    "spade_jax/run.py", "spade_jax/rl/trainer.py", "spade_jax/rl/checkpoint.py",
    "spade_jax/model/load.py", "spade_jax/model/checkpoint_format.py",
    "spade_jax/model/integrity.py", "spade_jax/model/lora_export.py",
    "spade_jax/metrics/logger.py",
    "spade_jax/metrics/tensorboard.py", "spade_jax/metrics/env_log.py",
    "spade_jax/export.py", "spade_jax/eval/__main__.py", "spade_jax/eval/evaluate.py",
    "spade_jax/eval/load.py", "spade_jax/eval/compare.py", "launch/tpu_run.py")
# What reaches the local file system directly (a gs:// path there becomes ./gs:/...).
FORBIDDEN = ("open", "builtins.open", "io.open", "os.open", "os.makedirs", "os.mkdir",
             "os.replace", "os.rename", "os.remove", "os.unlink", "os.listdir", "os.scandir",
             "os.stat", "os.walk", "os.path", "pathlib", "shutil", "glob", "tempfile")
TPU_RUN = os.fspath(config_schema.REPO_ROOT / "launch" / "tpu_run.py")


def _aliases(tree: ast.Module) -> dict[str, str]:
  """{local name: the qualified name it stands for}, from the module's imports."""
  names = {"open": "open"}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for a in node.names:
        names[a.asname or a.name] = f"{node.module}.{a.name}"
  return names


def _qualified(node: ast.AST, names: dict[str, str]) -> str | None:
  if isinstance(node, ast.Name):
    return names.get(node.id)
  if isinstance(node, ast.Attribute):
    base = _qualified(node.value, names)
    return f"{base}.{node.attr}" if base else None
  return None


def _direct_file_access(source: str) -> list[str]:
  """'line: name' for every use (call or reference) of a FORBIDDEN name, aliases resolved."""
  tree = ast.parse(source)
  names = _aliases(tree)
  found: dict[tuple[int, int], str] = {}  # (line, column) -> the longest dotted name there
  for node in ast.walk(tree):
    name = _qualified(node, names) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if name and any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
      where = (node.lineno, node.col_offset)
      found[where] = max(found.get(where, ""), name, key=len)
  return [f"{line}: {name}" for (line, _), name in sorted(found.items())]


def test_workdir_modules_reach_files_only_through_the_storage_layer():
  bad = {m: v for m in WORKDIR_MODULES
         if (v := _direct_file_access((config_schema.REPO_ROOT / m).read_text()))}
  assert not bad, f"file access outside spade_jax/storage.py: {bad}"


def test_the_scan_sees_aliased_and_referenced_calls():
  source = ("import os.path as osp\nfrom os import makedirs as mk\nimport pathlib as pl\n"
            "f = mk\nosp.join('a', 'b')\npl.Path('x').mkdir()\nwith open('x') as g: pass\n")
  assert _direct_file_access(source) == ["4: os.makedirs", "5: os.path.join",
                                         "6: pathlib.Path", "7: open"]


def test_every_module_that_takes_a_workdir_is_scanned():
  takes = set()
  for rel in [*imports_of(""), "../launch/tpu_run.py"]:
    path = (PACKAGE_ROOT / rel).resolve()
    tree = ast.parse(path.read_text())
    if any(isinstance(n, ast.arg) and n.arg == "workdir" for n in ast.walk(tree)):
      takes.add(os.fspath(path.relative_to(config_schema.REPO_ROOT)))
  takes.discard("spade_jax/storage.py")
  assert takes <= set(WORKDIR_MODULES), sorted(takes - set(WORKDIR_MODULES))


def test_storage_imports_nothing_of_the_project_nor_jax():
  names = imports_of("")["storage.py"]
  assert not [n for n in names if n.split(".")[0] in ("spade_jax", "jax", "launch")], names


@pytest.fixture
def no_local_gs(monkeypatch):
  """Fails the test if a gs:// path reaches a local file call (as ./gs:/... would)."""
  def guard(fn):
    def checked(*args, **kwargs):
      if any("gs:" in os.fspath(a) for a in args[:2] if isinstance(a, (str, os.PathLike))):
        raise AssertionError(f"{fn.__name__}{args[:2]} got a gs:// path")
      return fn(*args, **kwargs)
    return checked
  for module, name in ((builtins, "open"), (io, "open"), (os, "open"), (os, "mkdir"),
                       (os, "makedirs"), (os, "replace"), (os, "rename"), (os, "stat")):
    monkeypatch.setattr(module, name, guard(getattr(module, name)))


def test_appends_and_tensorboard_events_grow_a_gcs_object(gcs, no_local_gs):
  log = storage.Appender(f"{gcs}/append/log.txt")
  for i in range(3):
    log.write(f"line {i}\n")
    log.flush()
  assert storage.read_text(f"{gcs}/append/log.txt") == "line 0\nline 1\nline 2\n"
  writer = SummaryWriter(f"{gcs}/append/tb")
  for step in (1, 2):  # one flush per step: each must extend the event file, not replace it
    writer.scalar("loss", float(step), step)
    writer.flush()
  writer.close()
  acc = EventAccumulator(f"{gcs}/append/tb", size_guidance={"tensors": 0})
  acc.Reload()
  assert [e.step for e in acc.Tensors("loss")] == [1, 2]
  assert storage.listdir(f"{gcs}/append") == ["log.txt", "tb"]


def test_files_lists_every_file_at_any_depth_in_a_directory_and_in_a_bucket(gcs, tmp_path,
                                                                           no_local_gs):
  names = ["a.txt", "sub/b.txt", "sub/deeper/c.txt"]
  for root in (os.fspath(tmp_path / "tree"), f"{gcs}/tree"):
    for name in names:
      storage.write_text(f"{root}/{name}", name)
    found = storage.files(root)
    assert [os.fspath(f)[len(root) + 1:] for f in found] == names, found
    assert [f.read_text() for f in found] == names


def test_gs_is_the_plain_gcsfs_class_that_sends_no_grpc_bucket_probe(gcs):
  import gcsfs.core  # pylint: disable=import-outside-toplevel  (after storage's settings)
  assert type(fsspec.filesystem("gs")) is gcsfs.core.GCSFileSystem
  assert type(storage.path(f"{gcs}/x")._backend.fs(f"{gcs}/x")) is gcsfs.core.GCSFileSystem


# Run in a fresh interpreter: what importing storage, a first gs:// path and restore_gcs do
# to the process-wide settings (the session's `gcs` fixture has configured this one).
_GCS_SETTINGS_SCRIPT = """
import copy, os, fsspec
def settings():
  return (dict(os.environ), dict(fsspec.registry), copy.deepcopy(fsspec.config.conf))
before = settings()
from spade_jax import storage
assert settings() == before, "import changed the settings"
storage.path("gs://bucket/run")
import gcsfs.core
assert fsspec.registry["gs"] is gcsfs.core.GCSFileSystem
assert os.environ["TENSORSTORE_GCS_HTTP_URL"] == "http://127.0.0.1:1"
assert fsspec.config.conf["gs"] == {"use_listings_cache": False, "token": "anon"}
storage.restore_gcs()
assert settings() == before, "restore_gcs left changes"
"""


def test_gcs_settings_are_applied_at_the_first_gs_path_and_undone_by_restore():
  env = dict(os.environ, STORAGE_EMULATOR_HOST="http://127.0.0.1:1")
  env.pop("TENSORSTORE_GCS_HTTP_URL", None)
  env.pop("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", None)
  proc = subprocess.run([sys.executable, "-c", _GCS_SETTINGS_SCRIPT], env=env,
                        cwd=config_schema.REPO_ROOT, capture_output=True, text=True,
                        timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr


def test_tensorstore_reads_a_generation_and_writes_on_it(gcs):
  """orbax's OCDBT manifests are updated by conditional writes on the generation read."""
  kv = ts.KvStore.open(storage.tensorstore_kvstore(f"{gcs}/ts")).result()
  kv.write("manifest", b"one").result()
  read = kv.read("manifest").result()
  kv.write("manifest", b"two", if_equal=read.stamp.generation).result()
  assert kv.read("manifest").result().value == b"two"


def _flip(path: str) -> None:
  data = bytearray(storage.path(path).read_bytes())
  data[100:164] = bytes(b ^ 0xFF for b in data[100:164])
  storage.path(path).write_bytes(bytes(data))


def test_checkpoints_in_a_bucket_restore_and_quarantine_there(gcs, no_local_gs):
  directory = f"{gcs}/ckpt/checkpoints"
  mgr = CheckpointManager(directory, async_save=False)
  params = {"w": jnp.arange(64.0)}
  for step in (1, 2):
    mgr.save(step, jax_tree(params, step), {"m": jnp.zeros(3)}, np.zeros(2, np.uint32),
             {"step": step})
  mgr.wait_until_finished()
  item = storage.join(directory, "2", "params")
  data = [p for p in storage.files(item) if p.parent.name == "d"]
  _flip(os.fspath(max(data, key=lambda p: storage.size(p))))
  with pytest.warns(RuntimeWarning, match=f"checkpoint {directory}/2 is not usable"):
    restored = mgr.restore_latest(abstract_like(params), abstract_like({"m": jnp.zeros(3)}))
  assert restored.step == 1 and restored.host_state == {"step": 1}
  np.testing.assert_array_equal(restored.params["w"], jax_tree(params, 1)["w"])
  assert storage.listdir(directory) == ["1", "2.corrupt"]
  mgr.close()


def jax_tree(params, step):
  return {"w": params["w"] * step}


def test_check_writable_names_the_url_and_the_cause_in_one_line(gcs, monkeypatch):
  storage.check_writable(f"{gcs}/writable")  # the emulator's bucket: writable
  with pytest.raises(storage.StorageError, match="bucket 'no-such-bucket' does not exist"):
    storage.check_writable("gs://no-such-bucket/run")
  monkeypatch.delenv("STORAGE_EMULATOR_HOST")
  monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
  with pytest.raises(storage.StorageError, match=r"^workdir gs://b/r: no Google Cloud "
                     r"credentials \(DefaultCredentialsError: File /nonexistent/key.json"):
    storage.check_writable("gs://b/r")


def test_an_unreachable_workdir_stops_the_launcher_in_one_line(tmp_path):
  with socket.socket() as s:  # a port nobody listens on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{port}")
  start = time.monotonic()
  proc = subprocess.run([sys.executable, TPU_RUN, "--config", "smoke.py", "--workdir",
                         "gs://spade-test/unreachable"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120, check=False)
  assert time.monotonic() - start < 60
  assert proc.returncode == 1, proc.stderr
  assert proc.stderr.strip().splitlines() == [
      f"error: workdir gs://spade-test/unreachable: cannot connect to 127.0.0.1:{port} "
      "(ConnectionRefusedError: [Errno 111] Connection refused)"]
  assert not os.listdir(tmp_path)  # no ./gs:/...


def test_gs_hf_checkpoint_and_tokenizer_load_through_a_local_copy(gcs, tmp_path, monkeypatch):
  """config_schema accepts gs:// for model.checkpoint and tokenizer: the loaders read it."""
  from spade_jax.model import get_preset, hf_io, load_model
  from spade_jax.model.testing import random_model
  from spade_jax.tokenizer import load_tiny, load_tokenizer, tiny_model_path

  monkeypatch.setenv(storage.CACHE_ENV, os.fspath(tmp_path / "cache"))
  model = random_model(get_preset("tiny"), seed=3)
  hf_io.save_pretrained(model, tmp_path / "hf")
  for f in sorted((tmp_path / "hf").iterdir()):
    with storage.open_file(f"{gcs}/models/hf/{f.name}", "wb") as out:
      out.write(f.read_bytes())
  with storage.open_file(f"{gcs}/models/tok/tiny.model", "wb") as out:
    out.write(tiny_model_path().read_bytes())

  loaded = load_model(f"{gcs}/models/hf", dtype="float32")
  want, got = nnx.state(model, nnx.Param), nnx.state(loaded, nnx.Param)
  assert jax.tree.structure(want) == jax.tree.structure(got)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
  copy = tmp_path / "cache" / "gs" / gcs[len("gs://"):] / "models" / "hf" / "config.json"
  assert copy.is_file()
  before = copy.stat().st_mtime_ns
  storage.local_copy(f"{gcs}/models/hf")  # what is there already is not fetched again
  assert copy.stat().st_mtime_ns == before

  text = "The agent writes: aeiou, 42."
  tok = load_tokenizer(f"{gcs}/models/tok/tiny.model")
  assert tok.encode(text) == load_tiny().encode(text)
  with pytest.raises(storage.StorageError, match="no such file or directory"):
    load_tokenizer(f"{gcs}/models/no-tokenizer")
