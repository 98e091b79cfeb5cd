"""TPU programs compiled ahead of time on any machine, and what their HLO moves between chips.

XLA's TPU compiler (libtpu) runs without a TPU: `jax.experimental.topologies` describes the
chips of a slice, a `Mesh` over those devices shards `jax.ShapeDtypeStruct` arguments, and
`jit(f).lower(*args).compile()` gives the real TPU program with its per-chip
`memory_analysis()` and its HLO after SPMD partitioning. `plan --compile` and the TPU tests
judge the project's programs this way.

    devices = slice_devices("v5e-8")            # 8 TPU v5e devices, deviceless
    compiled = compile_program(fn, args)        # CompiledProgram: memory, seconds, HLO
    loop_collectives(compiled.hlo)              # collectives inside while-loop bodies
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Slice:
  """A Cloud TPU slice as `jax.experimental.topologies` describes it."""
  topology: str  # libtpu's topology name, e.g. "v5e:2x4"
  chips_per_host: tuple[int, int, int]
  hbm_gib: float  # per chip


# Cloud names: v5e / v6e count chips, v5p counts TensorCores (two a chip).
SLICES: dict[str, Slice] = {
    "v5e-1": Slice("v5e:1x1", (1, 1, 1), 16),
    "v5e-8": Slice("v5e:2x4", (2, 4, 1), 16),
    "v6e-8": Slice("v6e:2x4", (2, 4, 1), 32),
    "v5p-8": Slice("v5p:2x2x1", (2, 2, 1), 95),
    "v5p-64": Slice("v5p:4x4x2", (2, 2, 1), 95),
}


def libtpu_available() -> bool:
  """Whether the TPU compiler (the libtpu package) is installed."""
  import importlib.util
  return importlib.util.find_spec("libtpu") is not None


@functools.cache
def slice_devices(name: str) -> tuple[jax.Device, ...]:
  """The devices of slice `name` (a key of SLICES), for compiling without the chips."""
  if name not in SLICES:
    raise ValueError(f"unknown TPU slice {name!r}; expected one of {sorted(SLICES)}")
  if not libtpu_available():
    raise RuntimeError("the TPU compiler is not installed: pip install -r requirements-test.txt "
                       "(libtpu pinned to jax's version)")
  from jax.experimental import topologies
  s = SLICES[name]
  topo = topologies.get_topology_desc(
      platform="tpu", topology_name=s.topology, chip_config_name="default",
      chips_per_host_bounds=s.chips_per_host, num_slices=1, wrap=(False, False, False))
  return tuple(topo.devices)


def shaped(tree: Any, shardings: Any) -> Any:
  """`tree`'s leaves (arrays or shapes) as ShapeDtypeStructs carrying the matching leaf of
  `shardings`: the abstract arguments of a compile without the chips."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


@dataclasses.dataclass(frozen=True)
class CompiledProgram:
  """One compiled program's per-chip memory (bytes), compile seconds and HLO text; or, when
  the compiler refused it for HBM (`refused`), what the compiler said it needs as `temp`."""
  argument: int
  output: int
  alias: int
  temp: float
  compile_s: float
  hlo: str
  refused: bool = False

  @property
  def peak(self) -> int:
    """Arguments + outputs not aliased to them + temporaries: the program's HBM per chip."""
    return self.argument + self.output - self.alias + self.temp


def compile_program(fn: Callable, args: Sequence[Any], **jit_kwargs: Any) -> CompiledProgram:
  """jit(fn, **jit_kwargs) lowered on abstract `args` and compiled; nothing runs."""
  return measure(lambda: jax.jit(fn, **jit_kwargs).lower(*args).compile())


def measure(compile_it: Callable[[], jax.stages.Compiled]) -> CompiledProgram:
  """Runs `compile_it` (a lower + compile) and reads the program's memory, time and HLO."""
  start = time.perf_counter()
  try:
    compiled = compile_it()
  except jax.errors.JaxRuntimeError as err:  # over HBM: the compiler names what it needs
    return CompiledProgram(0, 0, 0, refused_bytes(err), time.perf_counter() - start, "",
                           refused=True)
  seconds = time.perf_counter() - start
  m = compiled.memory_analysis()
  return CompiledProgram(m.argument_size_in_bytes, m.output_size_in_bytes,
                         m.alias_size_in_bytes, m.temp_size_in_bytes, seconds,
                         compiled.as_text())


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# XLA's TPU compiler refuses a program over HBM; its message names what it needed, e.g.
# "the total memory required for HLO temporaries (22.89G) exceeds available HBM (15.75G)"
# or "Used 22.89G of 15.75G hbm".
_NEEDED = re.compile(r"(?:required[^(]*\(|Used )([\d.]+)([KMGT]?)")


def refused_bytes(err: jax.errors.JaxRuntimeError) -> float:
  """What a program the compiler refused for memory (RESOURCE_EXHAUSTED) needs at least, from
  the compiler's message (inf when it names no size); any other error is raised again."""
  message = str(err)
  if "RESOURCE_EXHAUSTED" not in message:
    raise err
  found = _NEEDED.search(message)
  return float(found[1]) * _UNITS[found[2]] if found else math.inf


def per_chip_bytes(tree: Any) -> int:
  """Bytes one chip holds of a tree of sharded (abstract or real) arrays: each leaf's shard."""
  return sum(math.prod(x.sharding.shard_shape(x.shape)) * jax.numpy.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(tree))


_COLLECTIVE_OPS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                   "ragged-all-to-all", "collective-permute")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][a-z0-9-]*)\(")
_CALLED = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)="
                     r"\{?((?:%[\w.\-]+(?:, )?)+)\}?")
_WHILE_BODY = re.compile(r"\bwhile\(.*?\bbody=%([\w.\-]+)")
_ARRAY = re.compile(r"\b(pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64|f8\w*)"
                    r"\[([\d,]*)\]")
_BITS = {"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "bf16": 16, "f16": 16, "s32": 32,
         "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64}


@dataclasses.dataclass(frozen=True)
class Collective:
  """A collective instruction of an HLO module: its op, result arrays and bytes per chip."""
  op: str  # e.g. "all-gather" (an async "-start" counts as its op)
  shapes: tuple[tuple[int, ...], ...]  # the result's array shapes
  bytes: int  # the largest result array's bytes
  computation: str
  # The groups of chips (ids in the program's device order) that exchange data: its replica
  # groups, or each source-target pair of a collective-permute; () where the HLO names none.
  groups: tuple[tuple[int, ...], ...] = ()


_IOTA = r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?"
_IOTA_GROUPS = re.compile(r"replica_groups=" + _IOTA)
_LISTED_GROUPS = re.compile(r"(?:replica_groups|source_target_pairs)="
                            r"\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]"
                          r"(?:, device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\))? \{([^}]*)\}")


def _ints(text: str | None) -> list[int]:
  return [int(v) for v in text.split(",") if v] if text else []


def _iota(dims: list[int], perm: list[int]):
  """XLA's iota device list: arange(prod(dims)) reshaped to dims and transposed by perm."""
  ids = np.arange(math.prod(dims)).reshape(dims)
  return ids.transpose(perm) if perm else ids


def device_groups(instruction: str) -> tuple[tuple[int, ...], ...]:
  """The groups of chips a collective instruction's HLO text exchanges data within, in any
  of XLA's spellings: listed groups (`{{0,1},{2,3}}`), an iota list (`[2,2]<=[4]`, with a
  transpose `T(1,0)`), a mesh with the axes it runs over (`mesh['axis_0'=2,'axis_1'=2]
  {'axis_1'}`, optionally over `device_ids`), or a collective-permute's source-target
  pairs."""
  m = _LISTED_GROUPS.search(instruction)
  if m:
    return tuple(tuple(_ints(g)) for g in re.findall(r"\{([\d,]*)\}", m[1]))
  m = _IOTA_GROUPS.search(instruction)
  if m:
    shape = _ints(m[1])
    return tuple(map(tuple, _iota(_ints(m[2]), _ints(m[3])).reshape(shape).tolist()))
  m = _MESH_GROUPS.search(instruction)
  if m:
    axes = re.findall(r"'([^']+)'=(\d+)", m[1])
    sizes = [int(n) for _, n in axes]
    ids = (_iota(_ints(m[2]), _ints(m[3])) if m[2] else _iota(sizes, [])).reshape(sizes)
    over = [i for i, (name, _) in enumerate(axes) if f"'{name}'" in m[4]]
    kept = [i for i in range(len(axes)) if i not in over]
    rows = ids.transpose(kept + over).reshape(-1, math.prod(sizes[i] for i in over))
    return tuple(map(tuple, rows.tolist()))
  return ()


def _array_bytes(dtype: str, dims: str) -> tuple[tuple[int, ...], int]:
  shape = tuple(int(d) for d in dims.split(",") if d)
  return shape, math.prod(shape) * _BITS.get(dtype, 8) // 8


def _parse(hlo: str) -> tuple[dict[str, list[str]], dict[str, set[str]], set[str]]:
  """(instruction lines per computation, computations each calls, while-loop bodies)."""
  lines: dict[str, list[str]] = {}
  calls: dict[str, set[str]] = {}
  bodies: set[str] = set()
  current = None
  for line in hlo.splitlines():
    head = _COMPUTATION.match(line)
    if head:
      current = head[1]
      lines[current], calls[current] = [], set()
      continue
    if current is None or not line.strip() or line.startswith("}"):
      continue
    lines[current].append(line)
    for group in _CALLED.findall(line):
      calls[current].update(name.strip().lstrip("%") for name in group.split(","))
    body = _WHILE_BODY.search(line)
    if body:
      bodies.add(body[1])
  return lines, calls, bodies


def collectives(hlo: str, *, in_loops: bool = False) -> list[Collective]:
  """The collectives of an HLO module's text (`compiled.as_text()`); with `in_loops`, only
  those in while-loop bodies and what those call (run once per iteration)."""
  lines, calls, bodies = _parse(hlo)
  names = set(lines)
  if in_loops:
    names, todo = set(), list(bodies)
    while todo:
      name = todo.pop()
      if name not in names:
        names.add(name)
        todo.extend(calls.get(name, ()))
  found = []
  for name in sorted(names):
    for line in lines.get(name, ()):
      m = _INSTRUCTION.match(line)
      if m is None:
        continue
      op = m[3].removesuffix("-start")
      if op not in _COLLECTIVE_OPS:
        continue
      arrays = [_array_bytes(d, dims) for d, dims in _ARRAY.findall(m[2])]
      found.append(Collective(op, tuple(s for s, _ in arrays),
                              max((b for _, b in arrays), default=0), name,
                              device_groups(line)))
  return found


def loop_collectives(hlo: str) -> list[Collective]:
  """The collectives that run once per iteration of some while loop."""
  return collectives(hlo, in_loops=True)
