"""The config checks every section struct shares: one error type, one message form.

A bad value fails with `ConfigError("config.<field>=<value>: expected <what>")`, one line
that names the field as it is written on the command line (`--config.<field>=...`).
`from_section` builds a struct from its config section; `derived` marks a field that another
section sets (it is computed when the experiment is built, never set in its own section).
This module imports nothing of the package, so the sandbox and every layer above it can
use it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
  """A config value that cannot work; the message names the field."""


def require(ok: bool, field: str, value: Any, expected: str) -> None:
  """Raises ConfigError("config.<field>=<value!r>: expected <expected>") unless `ok`."""
  if not ok:
    raise ConfigError(f"config.{field}={value!r}: expected {expected}")


def is_int(x: Any) -> bool:
  """An int that is not a bool."""
  return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
  """A finite int or float that is not a bool."""
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def require_int(value: Any, field: str, low: int) -> None:
  """An int >= low."""
  require(is_int(value) and value >= low, field, value, f"an int >= {low}")


def require_sizes(sizes: Any, field: str, optional: bool = False) -> None:
  """Strictly increasing ints >= 1: at least one, or (when `optional`) None or any number."""
  ok = optional and sizes is None or (
      isinstance(sizes, tuple) and (optional or len(sizes) >= 1)
      and all(is_int(b) and b >= 1 for b in sizes) and list(sizes) == sorted(set(sizes)))
  require(ok, field, sizes, "None or increasing ints >= 1" if optional
          else "increasing ints >= 1 (at least one)")


def derived(default: Any, source: str) -> Any:
  """A struct field computed from another section (`source`), never set in its own."""
  return dataclasses.field(default=default, metadata={"derived": source})


def settable_fields(cls: type) -> list[dataclasses.Field]:
  """The struct's fields that its config section holds (all but the derived ones)."""
  return [f for f in dataclasses.fields(cls) if "derived" not in f.metadata]


def section_defaults(cls: type) -> dict[str, Any]:
  """{field: default} of the struct's settable fields: its config section's defaults."""
  return {f.name: f.default for f in settable_fields(cls)}


def from_section(cls: type[T], section: Mapping[str, Any] | Any, name: str,
                 **derived_values: Any) -> T:
  """`cls` built from config.<name> (a ConfigDict or a mapping) and the derived fields.

  Lists become tuples; a key that is not a settable field raises ConfigError naming it
  (a derived one says where it comes from).
  """
  values = dict(section.to_dict() if hasattr(section, "to_dict") else section)
  for f in dataclasses.fields(cls):
    if f.name in values and "derived" in f.metadata:
      raise ConfigError(f"config.{name}.{f.name} is not a setting: it is derived from "
                        f"config.{f.metadata['derived']}")
  known = sorted(f.name for f in settable_fields(cls))
  unknown = sorted(set(values) - set(known))
  if unknown:
    raise ConfigError(f"unknown config.{name} field(s) {unknown}; known: {known}")
  values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
  return cls(**values, **derived_values)
