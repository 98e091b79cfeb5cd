"""Renders a checkpoint's jinja2 chat template the way transformers' `apply_chat_template` does.

Same environment (sandboxed, immutable, `trim_blocks`, `lstrip_blocks`, loop controls), same
globals (`raise_exception`, `strftime_now`, a `dict` constructor, `namespace`), same `tojson`
filter (no HTML escaping, `ensure_ascii=False`), and the same input preparation: keys whose
value is None are dropped from messages, the reasoning aliases (`thinking`, `reasoning`) fill
`reasoning_content`, and the tokenizer's special tokens are passed as template variables.
Chat templates come from the hub, so they are untrusted code: the sandbox is what keeps them
from reaching Python internals.
"""

from __future__ import annotations

import datetime
import functools
import importlib.resources
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

Message = Mapping[str, Any]
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def default_chat_template() -> str:
  """The Qwen3-format template shipped with spade_jax (assets/qwen3_chat_template.jinja)."""
  return (importlib.resources.files("spade_jax.tokenizer") / "assets" /
          "qwen3_chat_template.jinja").read_text(encoding="utf-8")


def _raise_exception(message: str):
  raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                    sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
  return datetime.datetime.now().strftime(fmt)


class _Namespace(jinja2.utils.Namespace):
  """`namespace()` that refuses underscore attributes (no route to dunders)."""

  def __init__(*args: Any, **kwargs: Any):  # pylint: disable=no-method-argument
    self, args = args[0], args[1:]
    attrs = dict(*args, **kwargs)
    for name in attrs:
      _Namespace._check(name)
    jinja2.utils.Namespace.__init__(self, attrs)

  def __setitem__(self, name: str, value: Any):
    _Namespace._check(name)
    jinja2.utils.Namespace.__setitem__(self, name, value)

  @staticmethod
  def _check(name: Any):
    if isinstance(name, str) and name.startswith("_"):
      raise jinja2.exceptions.SecurityError(
          f"chat templates cannot set underscore attributes on a namespace, got {name!r}")


class _DictConstructor:
  """`dict(...)` inside templates, without exposing the builtin type itself."""

  def __call__(self, *args: Any, **kwargs: Any) -> dict:
    return dict(*args, **kwargs)

  def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
    return dict.fromkeys(*args, **kwargs)


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
  """Compiles a chat template in a transformers-compatible sandboxed environment."""
  env = jinja2.sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = _tojson
  env.globals["raise_exception"] = _raise_exception
  env.globals["strftime_now"] = _strftime_now
  env.globals["dict"] = _DictConstructor()
  env.globals["namespace"] = _Namespace
  return env.from_string(source)


def _plain(value: Any) -> Any:
  """Deep copy built from JSON types only, so the template never sees rich objects."""
  if value is None or type(value) in (str, int, float, bool):
    return value
  if isinstance(value, str):
    return str.__str__(value)
  if isinstance(value, int):
    return int.__int__(value)
  if isinstance(value, float):
    return float.__float__(value)
  if isinstance(value, Mapping):
    return {_plain(k): _plain(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_plain(v) for v in value]
  if isinstance(value, tuple):
    return tuple(_plain(v) for v in value)
  raise TypeError(f"chat template inputs must be JSON-like, got {type(value).__name__}")


def _prepare_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
  if not messages:
    raise ValueError("cannot apply a chat template to an empty conversation")
  out = []
  for i, message in enumerate(messages):
    if not isinstance(message, Mapping):
      raise TypeError(f"message {i} must be a mapping with 'role' and 'content', got {message!r}")
    message = _plain({k: v for k, v in message.items() if v is not None})
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
      message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    out.append(message)
  return out


def render_chat(template: str, messages: Sequence[Message], *,
                tools: Sequence[Mapping[str, Any]] | None = None,
                add_generation_prompt: bool = True,
                special_tokens: Mapping[str, str] | None = None, **kwargs: Any) -> str:
  """Renders `messages` (and optional JSON-schema `tools`) with a chat template.

  Args:
    template: jinja2 source of the chat template.
    messages: [{"role", "content", optional "tool_calls", "reasoning_content", ...}].
    tools: JSON schemas of the callable tools (OpenAI function format), or None.
    add_generation_prompt: end with the header that opens an assistant turn.
    special_tokens: e.g. {"eos_token": "<|im_end|>"}; visible to the template as variables.
    **kwargs: extra template variables (e.g. enable_thinking=False); they override
      special tokens of the same name.
  """
  if tools is not None:
    for tool in tools:
      if not isinstance(tool, Mapping):
        raise TypeError(f"tools must be JSON-schema dicts, got {type(tool).__name__}")
    tools = _plain(list(tools))
  variables = _plain({**(special_tokens or {}), **kwargs})
  return compile_template(template).render(
      messages=_prepare_messages(messages), tools=tools, documents=None,
      add_generation_prompt=add_generation_prompt, **variables)
