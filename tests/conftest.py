"""Test-wide set-up: 8 fake CPU devices so sharding code is exercised on any machine."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
