"""spade_jax: SPADE self-play (environment designer + reasoning agent) in JAX."""

import os as _os

__version__ = "0.1.0"


def _no_tpu_runtime_without_chips() -> None:
  """With libtpu installed for deviceless TPU compiles (spade_jax.tpu_aot) on a host without
  TPU chips or a GPU plugin, jax would start the TPU runtime, which prints errors and falls
  back to the CPU: keep the CPU, quietly, as on a host without libtpu. Runs before jax is
  imported (it reads JAX_PLATFORMS then); an explicit JAX_PLATFORMS always wins."""
  import importlib.util
  import sys
  if "JAX_PLATFORMS" in _os.environ or "jax" in sys.modules:
    return
  if importlib.util.find_spec("libtpu") is None or _google_pci_device():
    return
  if any(importlib.util.find_spec(p) for p in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
    return
  _os.environ["JAX_PLATFORMS"] = "cpu"


def _google_pci_device() -> bool:
  """Whether a TPU (a PCI device of Google's vendor id) is attached, as jax itself checks."""
  root = "/sys/bus/pci/devices"
  try:
    names = _os.listdir(root)
  except OSError:
    return False
  for name in names:
    try:
      with open(_os.path.join(root, name, "vendor")) as f:
        if f.read().strip() == "0x1ae0":
          return True
    except OSError:
      continue
  return False


_no_tpu_runtime_without_chips()
