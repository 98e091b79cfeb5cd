"""The one place that maps logical axis names to mesh axes, plus mesh and sharding helpers.

Parameters carry `logical_axes` metadata (see layers.py). A rules table turns each name
into mesh axes; a mesh axis is dropped for a dimension it does not divide (e.g. 2 kv heads
over tensor=4 stay replicated) or when the mesh lacks it, so any preset runs on any mesh.
Two tables: `LOGICAL_RULES`, the trainer's (FSDP: weights split on the model dimension,
rows over data and fsdp), and `INFERENCE_RULES`, the engine's (tensor parallel: weights
split on every dimension but the model width, rows over data only). `use_rules` picks the
active one for code traced inside it; the trainer's is the default. Meshes use Auto axis
types: jit + GSPMD propagate shardings, and `constrain` pins the activations where it
matters.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from spade_jax.model.kv_cache import map_with_axes

MESH_AXES = ("data", "fsdp", "tensor", "expert")

Rules = Mapping[str, tuple[str, ...] | None]

# logical name -> mesh axes (None = replicated).
LOGICAL_RULES: dict[str, tuple[str, ...] | None] = {
    "batch": ("data", "fsdp"),  # activations
    "slots": ("data", "fsdp"),  # KV cache rows
    "vocab": ("tensor",),
    # The loss's vocabulary-parallel logits (rl/losses.py): the head split over every chip.
    "vocab_parallel": ("data", "fsdp", "tensor", "expert"),
    "embed": ("fsdp",),  # FSDP: weights sharded on the model dim, gathered per layer
    "q_heads": ("tensor",),
    "kv_heads": ("tensor",),
    "head_dim": None,
    "mlp": ("tensor",),
    "expert": ("expert",),
    "expert_logits": None,
    "norm": None,
    "length": None,
    "layers": None,  # the leading axis of a group's stacked layers (scanned over)
}

# The axes that split the model in the engine: every axis but `data`, whose chips hold
# replicas (each its own rows).
_MODEL_AXES = ("fsdp", "tensor", "expert")

# The engine's weights copy and decode state (engine/weights.py): every weight split over
# the model axes on a dimension other than the model width ("embed", whole), so a matmul
# of replicated activations needs at most a reduction of its output, never a gathered
# weight; experts split over the chips (expert parallel). Rows split over replicas only.
INFERENCE_RULES: dict[str, tuple[str, ...] | None] = {
    "batch": ("data",),
    "slots": ("data", *_MODEL_AXES),  # what the kv heads leave (see `logical_to_spec`)
    "vocab": _MODEL_AXES,
    "vocab_parallel": _MODEL_AXES,
    "embed": None,
    "q_heads": _MODEL_AXES,
    "kv_heads": _MODEL_AXES,
    "head_dim": None,
    "mlp": _MODEL_AXES,
    "expert": ("expert", "fsdp", "tensor"),
    "expert_logits": None,
    "norm": None,
    "length": None,
    "layers": None,
}

# Dimensions that take their mesh axes after the others of the same value: a KV cache's
# rows, so its kv heads split as the attention heads do and the rows take the axes left.
_CLAIM_LAST = ("slots",)

_ACTIVE_RULES: contextvars.ContextVar[Rules] = contextvars.ContextVar("rules",
                                                                      default=LOGICAL_RULES)


@contextlib.contextmanager
def use_rules(rules: Rules) -> Iterator[None]:
  """Makes `rules` the table of every sharding helper called inside (e.g. while tracing)."""
  token = _ACTIVE_RULES.set(rules)
  try:
    yield
  finally:
    _ACTIVE_RULES.reset(token)


def active_rules() -> Rules:
  """The rules table in effect: `use_rules`'s, else LOGICAL_RULES."""
  return _ACTIVE_RULES.get()


def make_mesh(mesh_cfg: Mapping[str, int], devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds a (data, fsdp, tensor, expert) mesh; one axis may be -1 to take the rest.

  mesh_cfg is e.g. {"data": 1, "fsdp": -1, "tensor": 1, "expert": 1}; absent axes are 1.
  """
  unknown = set(mesh_cfg) - set(MESH_AXES)
  if unknown:
    raise ValueError(f"mesh config has unknown axes {sorted(unknown)}; expected {MESH_AXES}")
  devices = list(jax.devices() if devices is None else devices)
  sizes = [int(mesh_cfg.get(name, 1)) for name in MESH_AXES]
  if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f"mesh config {dict(mesh_cfg)}: sizes must be >= 1, at most one -1")
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(f"mesh config {dict(mesh_cfg)}: {len(devices)} devices are not a "
                       f"multiple of the fixed axes' product {known}")
    sizes[sizes.index(-1)] = len(devices) // known
  if math.prod(sizes) != len(devices):
    raise ValueError(f"mesh config {dict(mesh_cfg)} needs {math.prod(sizes)} devices, "
                     f"{len(devices)} available")
  return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)


def replica_count(chips: int, replica_chips: int) -> int:
  """Replicas of the engine's weights on `chips` chips in groups of `replica_chips` (one
  over all of them on fewer chips); ValueError when the groups do not split the chips."""
  group = min(replica_chips, chips)
  if replica_chips < 1 or chips % group:
    raise ValueError(f"engine.replica_chips={replica_chips} must divide the mesh's {chips} "
                     "chips (0: one copy over all of them)")
  return chips // group


def engine_mesh(mesh: Mesh, replica_chips: int) -> Mesh:
  """The engine's mesh on `mesh`'s devices: groups of `replica_chips` chips, consecutive in
  the mesh's device order (ICI neighbours for `make_mesh`'s meshes), each holding a whole
  copy of the weights split over its chips ("tensor") and serving its share of the rows
  ("data"); a mesh of fewer chips holds one copy over all of them. 0 keeps `mesh`: one copy
  over its model axes, a replica per `data` row. The flattened device order is `mesh`'s, so
  one program can read the trainer's arrays and write the engine's."""
  if replica_chips == 0:
    return mesh
  chips = mesh.devices.size
  replicas = replica_count(chips, replica_chips)
  shape = (replicas, 1, chips // replicas, 1)  # MESH_AXES: data, fsdp, tensor, expert
  return Mesh(mesh.devices.reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * 4)


def logical_to_spec(axes: Sequence[str | None], shape: Sequence[int],
                    mesh: Mesh | AbstractMesh, rules: Rules | None = None) -> PartitionSpec:
  """PartitionSpec for a value of `shape` whose dimensions have logical names `axes`, by
  `rules` (default: the active table). Each dimension takes its rule's axes that divide it
  and no earlier dimension took; "slots" dimensions choose last."""
  if len(axes) != len(shape):
    raise ValueError(f"logical axes {tuple(axes)} do not match shape {tuple(shape)}")
  rules = active_rules() if rules is None else rules
  used: set[str] = set()
  spec: list[Any] = [None] * len(axes)
  for i in sorted(range(len(axes)), key=lambda i: axes[i] in _CLAIM_LAST):
    name, dim = axes[i], shape[i]
    if name is not None and name not in rules:
      raise KeyError(f"logical axis {name!r} has no rule in the sharding rules table")
    picked: list[str] = []
    for axis in (rules[name] or ()) if name is not None else ():
      size = mesh.shape.get(axis, 1)
      split = size * math.prod(mesh.shape[a] for a in picked)
      if size > 1 and axis not in used and dim % split == 0:
        picked.append(axis)
    used.update(picked)
    spec[i] = tuple(picked) if len(picked) > 1 else (picked[0] if picked else None)
  return PartitionSpec(*spec)


def batch_shards(mesh: Mesh | AbstractMesh | None) -> int:
  """How many ways batch rows are split on `mesh` (the sizes of the active rules' "batch"
  axes multiplied); a micro-batch's rows must be a multiple of it."""
  if mesh is None:
    return 1
  return math.prod(mesh.shape.get(axis, 1) for axis in active_rules()["batch"] or ())


def batch_sharding(mesh: Mesh, leading: int = 0) -> NamedSharding:
  """Rows split as the "batch" rule says, after `leading` unsplit dimensions (1 for
  [M, mb, ...] micro-batches), for any number of rows that is a multiple of `batch_shards`;
  later dimensions are replicated."""
  axes = (None,) * leading + ("batch",)
  return NamedSharding(mesh, logical_to_spec(axes, (1,) * leading + (batch_shards(mesh),),
                                             mesh))


def _is_variable(x: Any) -> bool:
  return isinstance(x, nnx.Variable)


def state_shardings(state: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
  """NamedShardings for an nnx state (or abstract state), same tree structure as `state`,
  by `rules` (default: the active table).

  Variables without `logical_axes` metadata (e.g. RNG state) are replicated.
  """
  def one(var):
    if not _is_variable(var):
      return NamedSharding(mesh, PartitionSpec())
    axes = var.get_metadata().get("logical_axes")
    shape = var.get_value().shape
    spec = logical_to_spec(axes, shape, mesh, rules) if axes is not None else PartitionSpec()
    return var.replace(NamedSharding(mesh, spec))
  return jax.tree.map(one, state, is_leaf=_is_variable)


def shard_model(model: nnx.Module, mesh: Mesh) -> nnx.Module:
  """Moves an existing model's parameters onto `mesh` per their logical axes (in place)."""
  state = nnx.state(model)
  nnx.update(model, jax.device_put(state, state_shardings(state, mesh)))
  return model


def create_sharded(factory: Callable[[], nnx.Module], mesh: Mesh | None = None) -> nnx.Module:
  """Runs `factory()` (e.g. `lambda: Qwen3(cfg, rngs=nnx.Rngs(0))`) as one jitted function.

  With a mesh the parameters come out of the jit already sharded per their logical axes,
  so no device ever holds the whole model. Without one the model lands on the default device.
  """
  graphdef, abstract_state = nnx.split(nnx.eval_shape(factory))
  shardings = None if mesh is None else state_shardings(abstract_state, mesh)

  def init():
    return nnx.split(factory())[1]

  return nnx.merge(graphdef, jax.jit(init, out_shardings=shardings)())


def abstract_sharded(factory: Callable[[], nnx.Module], mesh: Mesh) -> nnx.Module:
  """The module `create_sharded(factory, mesh)` would build, its parameters
  `jax.ShapeDtypeStruct`s carrying the same shardings: compiling against it (deviceless TPU
  programs, sizing) allocates nothing."""
  with jax.set_mesh(mesh):
    graphdef, state = nnx.split(nnx.eval_shape(factory))
  return nnx.merge(graphdef, jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state,
      state_shardings(state, mesh)))


def kv_cache_shardings(cache: Any, mesh: Mesh) -> Any:
  """NamedShardings for a KVCache by the active rules: its kv heads split as the heads,
  its rows ("slots") over what they leave."""
  return map_with_axes(cache, lambda x, names: NamedSharding(
      mesh, logical_to_spec(names, np.shape(x), mesh)))


def constrain(x: jax.Array, axes: Sequence[str | None], rules: Rules | None = None) -> jax.Array:
  """Sharding constraint for an activation by logical names and `rules` (default: the active
  table); a no-op without an active mesh."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  return jax.lax.with_sharding_constraint(x, logical_to_spec(axes, x.shape, mesh, rules))


def host_get(tree: Any) -> Any:
  """`jax.device_get` that also works on arrays spanning several processes' devices.

  A sharded global array cannot be read by one process directly; each such leaf is
  all-gathered (every process gets the whole array). Single-process and fully replicated
  leaves are read as they are.
  """
  def one(x):
    if isinstance(x, jax.Array) and not (x.is_fully_addressable or x.is_fully_replicated):
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return jax.device_get(x)
  return jax.tree.map(one, tree)
