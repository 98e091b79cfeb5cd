"""Fast random models for tests and CPU tools.

`Qwen3(cfg, rngs=...)` draws every parameter with jax.random; on CPU each threefry kernel
takes about a second to compile, which dominates small tests. `random_model` builds the
same module abstractly and fills it from numpy instead: no compile at all.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.model.config import ModelConfig
from spade_jax.model.layers import INIT_STD
from spade_jax.model.qwen3 import Qwen3


def fill_random(module: nnx.Module, seed: int = 0, std: float = INIT_STD) -> nnx.Module:
  """Replaces every parameter in place: norm scales = 1, kernels/embeddings ~ N(0, std^2)."""
  rng = np.random.default_rng(seed)

  def draw(path, value):
    if path[-1] == "scale":
      return jnp.ones(value.shape, value.dtype)
    return jnp.asarray(std * rng.standard_normal(value.shape, np.float32), value.dtype)

  state = nnx.state(module, nnx.Param)
  nnx.update(module, jax.tree_util.tree_map_with_path(
      lambda p, v: draw(tuple(getattr(k, "key", getattr(k, "name", k)) for k in p[:-1]), v),
      state))
  return module


def random_model(cfg: ModelConfig, seed: int = 0, std: float = INIT_STD) -> Qwen3:
  """A Qwen3 with numpy-drawn parameters (same tree, dtypes and metadata as `Qwen3(...)`)."""
  return fill_random(nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0))), seed, std)
