"""The XLA flags of the test session and of the processes its tests start.

The tests' programs are tiny and mostly compiled, not run, so LLVM's optimisation of the code
XLA:CPU generates (`--xla_backend_optimization_level=0`) is turned off: the HLO passes
(fusion, layouts, buffer assignment, sharding) are the same as in a run, only the machine
code is less optimised (bench/RESULTS_LOG.md, "make test with LLVM unoptimised"). The starter
build test keeps the defaults: it builds as the build command does.
"""

import os

FAST_COMPILE = "--xla_backend_optimization_level=0"
SESSION_DEVICES = 8  # fake CPU devices of the test session, so sharding code runs anywhere


def xla_flags(devices: int) -> str:
  """XLA_FLAGS for a process on `devices` fake CPU devices, compiled as the tests compile."""
  if devices == 1:
    return FAST_COMPILE
  return f"--xla_force_host_platform_device_count={devices} {FAST_COMPILE}"


def child_env(devices: int = 1, **overrides: str) -> dict[str, str]:
  """os.environ for a child process on the CPU with `devices` fake devices (one: no session
  devices to compile for), plus `overrides`."""
  return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices), **overrides}
