"""The JSON-schema subset of OpenAI function specs: checking schemas and values against them.

Tool parameters are JSON schemas; function-calling specs use a small part of JSON Schema:
`type` (object, array, string, integer, number, boolean, null, or a list of them),
`properties`, `required`, `enum`, `items`, `description`. `check_schema` accepts exactly
that subset (other keywords, such as `default` or `minimum`, are allowed and ignored; `$ref`
and the combinators `anyOf`/`oneOf`/`allOf`/`not` are refused, since a value cannot be
checked against them here). `validate` checks a value against such a schema, and
`sample_value` makes one up that matches it (the validator's tool calls). Written by
hand because the subset is small, the checks must explain themselves to the designer, and
the host-side validator must not depend on a resolver of remote references.
"""

from __future__ import annotations

from typing import Any

TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
REFUSED = ("$ref", "anyOf", "oneOf", "allOf", "not")
MAX_DEPTH = 16


class BadSchema(ValueError):
  """A schema outside the subset; the message names where."""


def _types(schema: dict) -> list[str]:
  kind = schema.get("type")
  return [] if kind is None else list(kind) if isinstance(kind, list) else [kind]


def check_schema(schema: Any, where: str = "parameters", depth: int = 0) -> None:
  """Raises BadSchema unless `schema` is a schema of the subset (module docstring)."""
  if depth > MAX_DEPTH:
    raise BadSchema(f"{where}: nested deeper than {MAX_DEPTH} levels")
  if not isinstance(schema, dict):
    raise BadSchema(f"{where} must be a JSON schema object, got {type(schema).__name__}")
  for key in REFUSED:
    if key in schema:
      raise BadSchema(f"{where}: {key!r} is not supported; use type, properties, required, "
                      "enum and items")
  kinds = _types(schema)
  bad = [k for k in kinds if k not in TYPES]
  if bad or (isinstance(schema.get("type"), list) and not kinds):
    raise BadSchema(f"{where}.type must be one of {TYPES} (or a list of them), got "
                    f"{schema.get('type')!r}"[:300])
  if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
    raise BadSchema(f"{where}.enum must be a non-empty list")
  if not isinstance(schema.get("description", ""), str):
    raise BadSchema(f"{where}.description must be a string")
  properties = schema.get("properties", {})
  if not isinstance(properties, dict):
    raise BadSchema(f"{where}.properties must be an object of schemas")
  for name, sub in properties.items():
    check_schema(sub, f"{where}.properties.{name}", depth + 1)
  required = schema.get("required", [])
  if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
    raise BadSchema(f"{where}.required must be a list of property names")
  missing = [r for r in required if r not in properties]
  if missing:
    raise BadSchema(f"{where}.required names {missing}, which are not in its properties")
  if "items" in schema:
    check_schema(schema["items"], f"{where}.items", depth + 1)


def _is(value: Any, kind: str) -> bool:
  if kind == "integer":
    return isinstance(value, int) and not isinstance(value, bool) or (
        isinstance(value, float) and value.is_integer())
  return {"object": lambda: isinstance(value, dict), "array": lambda: isinstance(value, list),
          "string": lambda: isinstance(value, str), "boolean": lambda: isinstance(value, bool),
          "number": lambda: isinstance(value, (int, float)) and not isinstance(value, bool),
          "null": lambda: value is None}[kind]()


def validate(value: Any, schema: dict, where: str = "arguments") -> str | None:
  """The first way `value` breaks `schema` (a checked schema), None when it conforms."""
  kinds = _types(schema)
  if kinds and not any(_is(value, k) for k in kinds):
    return f"{where} must be {' or '.join(kinds)}, got {type(value).__name__}"
  if "enum" in schema and value not in schema["enum"]:
    return f"{where} must be one of {schema['enum']}"[:300]
  if isinstance(value, dict):
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
      if name not in value:
        return f"{where} lacks the required {name!r}"
    for name, item in value.items():
      if name in properties:
        problem = validate(item, properties[name], f"{where}.{name}")
        if problem:
          return problem
  if isinstance(value, list) and "items" in schema:
    for i, item in enumerate(value):
      problem = validate(item, schema["items"], f"{where}[{i}]")
      if problem:
        return problem
  return None


def sample_value(schema: Any, depth: int = 0) -> Any:
  """A value that conforms to a schema of the subset (one that check_schema accepted)."""
  if not isinstance(schema, dict) or depth > MAX_DEPTH:
    return "a"
  if isinstance(schema.get("enum"), list) and schema["enum"]:
    return schema["enum"][0]
  kind = schema.get("type", "string")
  kind = (kind[0] if kind else "string") if isinstance(kind, list) else kind
  if kind == "object":
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    return {name: sample_value(sub, depth + 1) for name, sub in properties.items()}
  if kind == "array":
    return [sample_value(schema["items"], depth + 1)] if "items" in schema else []
  return {"integer": 1, "number": 1.5, "boolean": True, "null": None}.get(kind, "a")
