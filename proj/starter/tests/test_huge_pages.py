"""The restart with glibc's huge-page tunable: what it sets, and that the kernel then gives
huge pages to a large malloc (read from /proc/self/smaps_rollup of a real process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from proj.starter import huge_pages

OFFERED = huge_pages.environment_with_huge_pages({}) is not None
needs_tunable = pytest.mark.skipif(not OFFERED, reason="needs Linux, glibc 2.35+ and THP")

# Mallocs 256 MiB with glibc (not numpy, which asks for huge pages itself), touches it and
# prints the process's anonymous huge-page total in KiB, after the restart if there is one.
PROBE = textwrap.dedent("""
    import ctypes, os
    from proj.starter import huge_pages
    huge_pages.restart_with_huge_pages()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    size = 256 << 20
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    rollup = open("/proc/self/smaps_rollup").read().splitlines()
    huge = [int(line.split()[1]) for line in rollup if line.startswith("AnonHugePages:")]
    print(os.environ.get("GLIBC_TUNABLES", ""), huge[0])
""")


def _probe(**env_overrides: str) -> tuple[str, int]:
  env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"} | env_overrides
  out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       check=True, timeout=120).stdout.split()
  tunables, huge_kib = (out[0], int(out[1])) if len(out) == 2 else ("", int(out[0]))
  return tunables, huge_kib


@needs_tunable
def test_the_restart_sets_the_tunable_and_a_large_malloc_gets_huge_pages():
  tunables, huge_kib = _probe()
  assert tunables == f"{huge_pages.TUNABLE}=1"
  assert huge_kib >= 128 << 10  # at least half of the 256 MiB block


@needs_tunable
def test_switched_off_it_does_not_restart_and_the_malloc_gets_small_pages():
  tunables, huge_kib = _probe(**{huge_pages.SWITCH: "0"})
  assert tunables == ""
  assert huge_kib < 128 << 10


@needs_tunable
def test_tunables_already_there_are_kept():
  env = huge_pages.environment_with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
  assert env["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{huge_pages.TUNABLE}=1"


def test_no_restart_where_the_tunable_is_set_or_switched_off():
  assert huge_pages.environment_with_huge_pages(
      {"GLIBC_TUNABLES": f"{huge_pages.TUNABLE}=0"}) is None
  assert huge_pages.environment_with_huge_pages({huge_pages.SWITCH: "0"}) is None
