"""Test-wide set-up of tests/ and of the projects' tests (proj/*/tests): 8 fake CPU devices
so sharding code is exercised on any machine, compiled with LLVM unoptimised
(tests/xla_flags.py), implicit rank promotion as an error (a silent broadcast is a bug;
subprocesses inherit the variable), and a GCS emulator for the tests that write gs://
workdirs (the `gcs` fixture)."""

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.xla_flags import SESSION_DEVICES, xla_flags

os.environ.setdefault("XLA_FLAGS", xla_flags(SESSION_DEVICES))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Deviceless TPU compiles (tests/tpu) in several xdist workers load libtpu side by side.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"

import jax  # noqa: E402 - after the device flags

jax.config.update("jax_numpy_rank_promotion", "raise")  # should jax have been imported before

from spade_jax import storage  # noqa: E402

BUCKET = "spade-test"  # GCS bucket names have at least 3 characters
# The longest files (a whole pipeline, or many TPU compiles: minutes each), longest first,
# are collected first. With `--dist loadfile --no-loadscope-reorder` (the Makefile) xdist
# hands files out in collection order, so the workers start on them and the short files fill
# in around them; the first three are `make test-slow`'s, the rest `make test`'s. xdist's own
# order (most tests first) started the longest, four tests, near the end, where it ran alone
# beside idle cores.
SLOW_FILES_FIRST = ("proj/starter/tests/test_build.py", "tests/launch/test_multiprocess_e2e.py",
                    "tests/tpu/test_plan_vs_compile.py", "tests/launch/test_smoke_e2e.py",
                    "tests/bench/test_accelerator_bench_tpu.py", "tests/tpu/test_tpu_compile.py",
                    "tests/bench/test_accelerator_bench.py")


def pytest_collection_modifyitems(items):
  def rank(item):
    path = item.nodeid.partition("::")[0]
    return SLOW_FILES_FIRST.index(path) if path in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)

  items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def gcs():
  """A GCS JSON API on the loopback (`gcp-storage-emulator`, in memory, through
  tests/gcs_emulator.py) with the bucket
  BUCKET; yields "gs://<BUCKET>". STORAGE_EMULATOR_HOST and TENSORSTORE_GCS_HTTP_URL point this
  process and its children at it (spade_jax/storage.py's gs:// settings, undone at the end),
  until the session ends."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  url = f"http://127.0.0.1:{port}"
  proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "tests",
                                                        "gcs_emulator.py"), "start", "--host",
                           "127.0.0.1", "--port", str(port), "--default-bucket", BUCKET,
                           "--in-memory", "--quiet"], start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 30
  while True:
    try:
      socket.create_connection(("127.0.0.1", port), timeout=1).close()
      break
    except OSError:
      if proc.poll() is not None or time.monotonic() > deadline:
        proc.kill()
        raise RuntimeError(f"gcp-storage-emulator did not start on {url}") from None
      time.sleep(0.1)
  saved = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL")}
  os.environ.update(STORAGE_EMULATOR_HOST=url, TENSORSTORE_GCS_HTTP_URL=url)
  storage.configure_gcs()
  try:
    yield f"gs://{BUCKET}"
  finally:
    proc.kill()
    proc.wait()
    storage.restore_gcs()
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
