"""The engine's own copy of the policy's weights: compute dtype, inference sharding.

The trainer's parameters are split FSDP-style on the model dimension (sharding.LOGICAL_RULES),
in float32 for full fine-tuning; sampling from them would all-gather every weight at every
decode step. The engine samples from its own copy instead: cast to the compute dtype (the
layers cast every weight to it at its use anyway, so the tokens do not change; the MoE
router keeps its dtype, it runs in float32) and laid out by sharding.INFERENCE_RULES, where
a decode step moves activations only. `EngineWeights.load` makes the copy from the trainer's
parameters with one jitted program (cast and reshard, the copy's layout as its output
shardings) that reads them and donates nothing. With LoRA the frozen base is copied when
its arrays change (the first load) and only the adapters at every load. The copy stays
resident while the trainer runs (plan.py counts it).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from spade_jax.model import lora
from spade_jax.model.config import ModelConfig
from spade_jax.model.sharding import INFERENCE_RULES, state_shardings


def _is_variable(x: Any) -> bool:
  return isinstance(x, nnx.Variable)


def copy_dtype(var: nnx.Variable, compute_dtype: jnp.dtype) -> jnp.dtype:
  """The dtype of a parameter's copy: the compute dtype where that is narrower, except the
  MoE router's kernel (logical axis "expert_logits"), which runs in float32."""
  dtype = jnp.dtype(var.get_value().dtype)
  if ("expert_logits" in (var.get_metadata().get("logical_axes") or ())
      or not jnp.issubdtype(dtype, jnp.floating) or dtype.itemsize <= compute_dtype.itemsize):
    return dtype
  return compute_dtype


class EngineWeights:
  """Makes the engine's copy of parameters shaped like `params` (the model's state)."""

  def __init__(self, params: nnx.State, cfg: ModelConfig, mesh: Mesh | None):
    self.mesh = mesh
    self.compute_dtype = jnp.dtype(cfg.compute_dtype)
    self._like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    self._lora = cfg.lora_rank > 0
    self._programs: dict[Any, Any] = {}
    self._base: tuple[list[jax.Array], nnx.State] | None = None  # (source leaves, their copy)

  def abstract(self) -> nnx.State:
    """The copy as ShapeDtypeStructs (its dtypes and shardings): compiling against it
    allocates nothing."""
    def one(var: nnx.Variable, sharding=None) -> nnx.Variable:
      dtype = copy_dtype(var, self.compute_dtype)
      return var.replace(jax.ShapeDtypeStruct(var.get_value().shape, dtype, sharding=sharding))
    shardings = self._shardings(self._like)
    if shardings is None:
      return jax.tree.map(one, self._like, is_leaf=_is_variable)
    return jax.tree.map(lambda v, s: one(v, s.get_value()), self._like, shardings,
                        is_leaf=_is_variable)

  def check(self, params: nnx.State) -> None:
    """Raises a one-line ValueError unless `params` has the model's tree, shapes and dtypes."""
    if jax.tree.structure(params) != jax.tree.structure(self._like):
      raise ValueError("load_weights: parameter tree does not match the engine's model "
                       f"({jax.tree.structure(params)} vs {jax.tree.structure(self._like)})")
    for (path, new), old in zip(jax.tree_util.tree_leaves_with_path(params),
                                jax.tree.leaves(self._like), strict=True):
      if (new.shape, new.dtype) != (old.shape, old.dtype):
        raise ValueError(f"load_weights: {jax.tree_util.keystr(path)} is {new.dtype}"
                         f"{list(new.shape)}, the engine's model has {old.dtype}{list(old.shape)}")

  def load(self, params: nnx.State) -> nnx.State:
    """The copy of `params` (checked first). With LoRA the base's copy is reused while the
    base's arrays are the same objects as at the last load."""
    self.check(params)
    if not self._lora:
      return self._copy(params)
    adapters, base = nnx.split_state(params, lora.LoRAParam, ...)
    leaves = jax.tree.leaves(base)
    if self._base is None or any(a is not b for a, b in zip(leaves, self._base[0], strict=True)):
      self._base = None  # the old base copy's memory is free for the new one
      self._base = (leaves, self._copy(base))
    return nnx.merge_state(self._base[1], self._copy(adapters))

  def program(self, params: nnx.State):
    """The jitted cast-and-reshard of a tree shaped like `params` (all of the model's
    state, or the LoRA adapters or base alone)."""
    key = jax.tree.structure(params)
    if key not in self._programs:
      cast = lambda state: jax.tree.map(
          lambda v: v.replace(v.get_value().astype(copy_dtype(v, self.compute_dtype))),
          state, is_leaf=_is_variable)
      self._programs[key] = jax.jit(cast, out_shardings=self._shardings(params))
    return self._programs[key]

  def _copy(self, params: nnx.State) -> nnx.State:
    """`params` cast and resharded; as they are when they already have the copy's dtypes and
    layout (no program, no second copy)."""
    if self._in_place(params):
      return params
    return self.program(params)(params)

  def _in_place(self, params: nnx.State) -> bool:
    """Whether every array of `params` already has its copy's dtype and layout."""
    shardings = self._shardings(params)
    targets = (jax.tree.leaves(shardings) if shardings is not None
               else [None] * len(jax.tree.leaves(params)))
    dtypes = [copy_dtype(v, self.compute_dtype)
              for v in jax.tree.leaves(params, is_leaf=_is_variable)]
    return all(x.dtype == d and (s is None or x.sharding.is_equivalent_to(s, x.ndim))
               for x, d, s in zip(jax.tree.leaves(params), dtypes, targets, strict=True))

  def _shardings(self, params: nnx.State) -> nnx.State | None:
    """The copy's NamedShardings for a tree shaped like `params` (None without a mesh)."""
    return None if self.mesh is None else state_shardings(params, self.mesh, INFERENCE_RULES)
