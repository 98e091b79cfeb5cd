"""Checksums of saved array trees, and which orbax (OCDBT) data file holds which array.

orbax restores a checkpoint whose data files have flipped bytes without an error (the values
are simply wrong), so the trainer records a fingerprint of every array when it saves and
compares it after restoring. The fingerprint is two position-weighted sums of the array's
bits modulo 2**32, computed on the devices in one jitted call: integer addition is exact and
order-free, so it is the same for any sharding and any number of processes (the restored
array may be laid out differently from the saved one), and it needs no host copy of the
arrays. Each weight is odd, so any change of a single element changes both sums.

`data_files(item_dir)` reads the OCDBT b-tree (tensorstore's `ocdbt.dump`) to name the files
an array's chunks live in, so an error can say which file to look at.
"""

from __future__ import annotations

import collections
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tensorstore as ts
from etils import epath

from spade_jax import storage
from spade_jax.model.hf_config import CheckpointError
from spade_jax.model.sharding import host_get

_VALUE_REF = re.compile(r"^value:(?P<dir>[^:]*):(?P<file>[^:]+):(?P<offset>\d+):(?P<length>\d+)$")
_READ_KEY = re.compile(r'Error reading "(?P<array>[^"/]+)/')
_NODE_REF = re.compile(r"^btreenode::(?P<file>[^:]+):(?P<offset>\d+):(?P<length>\d+)$")


class CheckpointIntegrityError(CheckpointError):
  """A checkpoint whose arrays or files are not what was saved; the message names them."""


def array_names(tree: Any) -> list[str]:
  """Every leaf's name as orbax keys it in OCDBT (e.g. 'layers.0.attn.q_proj.kernel.value')."""
  def part(key) -> str:
    for attr in ("key", "idx", "name"):
      if hasattr(key, attr):
        return str(getattr(key, attr))
    return str(key)
  return [".".join(part(k) for k in path) for path, _ in jax.tree_util.tree_leaves_with_path(tree)]


def _as_uint32(x: jax.Array) -> jax.Array:
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  width = x.dtype.itemsize
  if width == 4:
    return jax.lax.bitcast_convert_type(x, jnp.uint32)
  if width in (1, 2):
    return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{8 * width}")).astype(jnp.uint32)
  raise TypeError(f"no checksum for dtype {x.dtype} (32-bit or narrower only)")


def _fingerprint(x: jax.Array) -> jax.Array:
  """[3] uint32: two weighted bit sums and the count of non-finite elements."""
  bits = _as_uint32(x).reshape(-1)  # [N]
  index = jnp.arange(bits.size, dtype=jnp.uint32)
  w1 = index * jnp.uint32(0x9E3779B1) | jnp.uint32(1)
  w2 = (index ^ jnp.uint32(0x5BD1E995)) * jnp.uint32(0x85EBCA6B) | jnp.uint32(1)
  h1 = jnp.sum(bits * w1, dtype=jnp.uint32)
  h2 = jnp.sum((bits ^ (bits >> 15)) * w2, dtype=jnp.uint32)
  bad = (jnp.sum(~jnp.isfinite(x), dtype=jnp.uint32) if jnp.issubdtype(x.dtype, jnp.floating)
         else jnp.uint32(0))
  return jnp.stack([h1, h2, bad])


@jax.jit
def _fingerprints(leaves: list[jax.Array]) -> jax.Array:
  return jnp.stack([_fingerprint(x) for x in leaves]) if leaves else jnp.zeros((0, 3),
                                                                               jnp.uint32)


def fingerprints(tree: Any) -> dict[str, tuple[list[int], int]]:
  """{array name: ([two checksums], number of non-finite elements)} of a tree of arrays."""
  leaves = jax.tree.leaves(tree)
  out = np.asarray(host_get(_fingerprints(leaves)))  # [leaves, 3]
  return {name: ([int(row[0]), int(row[1])], int(row[2]))
          for name, row in zip(array_names(tree), out, strict=True)}


def checksums(tree: Any) -> dict[str, list[int]]:
  """{array name: [two checksums]}: what a checkpoint records for each saved array."""
  return {name: sums for name, (sums, _) in fingerprints(tree).items()}


def data_files(item_dir: str | os.PathLike) -> dict[str, list[epath.Path]]:
  """{array name: the files holding its chunks} of an orbax OCDBT item directory.

  Raises CheckpointIntegrityError naming the file when a referenced file is missing or
  shorter than the b-tree says, or when the b-tree itself cannot be read.
  """
  item_dir = storage.path(item_dir)  # a local directory or gs://
  try:
    kv = ts.KvStore.open(storage.tensorstore_kvstore(item_dir)).result()
    manifest = ts.ocdbt.dump(kv).result()
  except Exception as e:  # noqa: BLE001 - tensorstore raises plain ValueErrors
    raise CheckpointIntegrityError(
        f"{item_dir}: the OCDBT manifest cannot be read ({type(e).__name__}: {e})") from None
  files: dict[str, set[epath.Path]] = collections.defaultdict(set)
  versions = manifest.get("versions") or []
  pending = [(versions[-1]["root"]["location"], "")] if versions else []
  while pending:
    location, base = pending.pop()
    node_file = _checked(item_dir, _NODE_REF, location, "b-tree node", "")
    try:
      node = ts.ocdbt.dump(kv, location).result()
    except Exception as e:  # noqa: BLE001
      raise CheckpointIntegrityError(f"{node_file}: b-tree node cannot be read "
                                     f"({type(e).__name__}: {e})") from None
    for entry in node.get("entries", []):
      key = base + _text(entry.get("key", entry.get("key_prefix", "")))
      name, _, chunk = key.partition("/")
      if "node" in entry:  # an interior node: descend
        pending.append((entry["node"]["location"], key))
      elif "indirect_value" in entry:
        files[name].add(_checked(item_dir, _VALUE_REF, entry["indirect_value"], "chunk", name))
      elif not chunk.startswith("."):  # a chunk stored inline in the node (not .zarray)
        files[name].add(node_file)
  return {name: sorted(paths) for name, paths in files.items()}


def read_error(err: BaseException, files: dict[str, dict[str, list[epath.Path]]]) -> str:
  """One line for an orbax restore that failed in tensorstore: the array tensorstore names
  (`Error reading "<array>/<chunk>"`, deep in the exception chain, under orbax's spec
  dump), its data files from `files` ({item: data_files(...)}), and tensorstore's reason."""
  chain: list[BaseException] = []
  while err is not None and all(err is not seen for seen in chain):
    chain.append(err)
    err = err.__cause__ or err.__context__
  for e in reversed(chain):  # the innermost error says what failed
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    m = _READ_KEY.search(text)
    if m is None:
      continue
    named = [(item, paths) for item, by_name in files.items()
             for name, paths in by_name.items() if name == m["array"]]
    item, paths = next(((i, p) for i, p in named if f"/{i}/" in text), named[0] if named
                       else ("", []))
    where = ", ".join(map(str, paths)) or "(files unknown)"
    return (f"array {item + '/' if item else ''}{m['array']} cannot be read, data in {where} "
            f"({type(e).__name__}: {text[:300]})")
  text = (str(chain[-1]).strip().splitlines() or [""])[0]
  return f"arrays (unknown): {type(chain[-1]).__name__}: {text[:300]}"


def _text(key: Any) -> str:
  """tensorstore dumps keys as the repr of bytes (b'...')."""
  if isinstance(key, bytes):
    return key.decode("utf-8", "replace")
  key = str(key)
  return key[2:-1] if key.startswith(("b'", 'b"')) else key


def _checked(item_dir: epath.Path, pattern: re.Pattern, ref: str, what: str,
             array: str) -> epath.Path:
  """The file a b-tree reference points into; it must exist and hold the referenced bytes."""
  m = pattern.match(ref)
  if m is None:
    raise CheckpointIntegrityError(f"{item_dir}: unexpected OCDBT reference {ref!r}")
  path = item_dir / m.groupdict().get("dir", "") / m["file"]
  of_array = f" of array {array}" if array else ""
  size = storage.size(path)
  if size is None:
    raise CheckpointIntegrityError(f"{path}: file missing ({what}{of_array})")
  end = int(m["offset"]) + int(m["length"])
  if size < end:
    raise CheckpointIntegrityError(
        f"{path}: file truncated to {size} bytes, {end} expected ({what}{of_array})")
  return path


def verify(tree: Any, expected: dict[str, list[int]], where: str,
           files: dict[str, list[epath.Path]] | None = None) -> None:
  """Raises CheckpointIntegrityError unless every array of `tree` is finite and matches
  `expected` (from `checksums` at save time); names the arrays and their files."""
  found = fingerprints(tree)
  missing = sorted(set(expected) - set(found))
  unexpected = sorted(set(found) - set(expected))
  if missing or unexpected:
    raise CheckpointIntegrityError(f"{where}: saved arrays {missing} not restored, restored "
                                   f"arrays {unexpected} not saved")
  problems = []
  for name, (sums, bad) in found.items():
    if sums != list(expected[name]):
      problems.append((name, f"checksum mismatch (saved {list(expected[name])}, read {sums})"))
    elif bad:
      problems.append((name, f"{bad} non-finite values"))
  if problems:
    lines = [f"array {name}: {why}; data in "
             f"{', '.join(map(str, (files or {}).get(name, []))) or '(files unknown)'}"
             for name, why in problems]
    more = f" (and {len(lines) - 3} more arrays)" if len(lines) > 3 else ""
    raise CheckpointIntegrityError(f"{where}: " + "; ".join(lines[:3]) + more)
