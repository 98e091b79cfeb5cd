"""Transparent huge pages for XLA's CPU temporaries, asked for before the interpreter starts.

XLA on CPU takes fresh memory for its temporaries at every call. glibc maps large blocks with
`mmap`, and the kernel then faults them in 4 KiB at a time: a third of the starter build's CPU
time went to that. glibc's `glibc.malloc.hugetlb=1` tunable (2.35+) marks those maps for
transparent huge pages, 2 MiB a fault, and changes no result. glibc reads tunables only when a
process starts, so `restart_with_huge_pages()` starts the same command again once with the
tunable set. It does nothing where it cannot help: not Linux with glibc 2.35+, huge pages
switched off in the kernel, the tunable already set, or `SPADE_JAX_HUGE_PAGES=0`.
"""

from __future__ import annotations

import os
import pathlib
import platform
import sys

TUNABLE = "glibc.malloc.hugetlb"
SWITCH = "SPADE_JAX_HUGE_PAGES"
THP_ENABLED = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _glibc_has_tunable() -> bool:
  libc, version = platform.libc_ver()
  if libc != "glibc" or not version:
    return False
  major, minor = (int(part) for part in version.split(".")[:2])
  return (major, minor) >= (2, 35)


def _kernel_offers_huge_pages() -> bool:
  try:
    return "[never]" not in THP_ENABLED.read_text()
  except OSError:
    return False


def environment_with_huge_pages(env: dict[str, str]) -> dict[str, str] | None:
  """`env` plus the tunable, or None where the tunable is set, switched off or of no use."""
  if env.get(SWITCH) == "0" or TUNABLE in env.get("GLIBC_TUNABLES", ""):
    return None
  if sys.platform != "linux" or not _glibc_has_tunable() or not _kernel_offers_huge_pages():
    return None
  tunables = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), f"{TUNABLE}=1"]))
  return {**env, "GLIBC_TUNABLES": tunables}


def restart_with_huge_pages() -> None:
  """Replaces this process by the same command with huge pages asked for; else returns."""
  env = environment_with_huge_pages(dict(os.environ))
  if env is None:
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
