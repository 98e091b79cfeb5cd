"""The one platform switch: which chip the program being built is for.

The active mesh's devices decide (so a mesh over a deviceless TPU topology on a CPU host
builds the TPU branches: splash attention, paged decode, the TPU cache layout); without a
mesh, jax's default backend does. Every kernel and layout choice asks here.
"""

from __future__ import annotations

import jax


def current_platform() -> str:
  """'cpu', 'gpu' or 'tpu': the active mesh's platform, else jax's default backend."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else getattr(mesh, "abstract_device", None)
  return device.platform if device is not None else jax.default_backend()
