"""The one platform switch: which chip the program being built is for.

The active mesh's devices decide (so a mesh over a deviceless TPU topology on a CPU host
builds the TPU branches: splash attention, paged decode, the TPU cache layout); without a
mesh, jax's default backend does. Every kernel and layout choice asks here.
"""

from __future__ import annotations

import jax


def current_platform() -> str:
  """'cpu', 'gpu' or 'tpu': the active mesh's platform, else jax's default backend."""
  device = _mesh_device()
  return device.platform if device is not None else jax.default_backend()


def cores_per_chip() -> int:
  """TensorCores behind one device of the active mesh (else of jax's first device): 2 on
  megacore chips (v4, v5p), whose kernels must split their grid to use both."""
  device = _mesh_device() or jax.devices()[0]
  return getattr(device, "num_cores", None) or 1


def _mesh_device():
  mesh = jax.sharding.get_abstract_mesh()
  return None if mesh.empty else getattr(mesh, "abstract_device", None)
