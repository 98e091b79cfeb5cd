"""The designer role: prompts -> engine -> parsed (source, hint) -> sandbox validation.

Parsing is strict and structured, so an invalid output is counted under a named rule.
Reasoning never counts: a code block or <hint> drafted inside <think>...</think> is
dropped first (`replies.visible_text`, the agent's rule too).

  truncated             the output hit max_new_tokens / the cache before it finished, or a
                        code fence or <hint> is left open
  no_code_block         no fenced python block
  multiple_code_blocks  more than one fenced block
  no_class / multiple_classes   the block defines no / several top-level classes
  no_hint / multiple_hints / empty_hint

Outputs that parse are validated in the sandbox in one batched call; a failed validation
is counted as "sandbox/<rule>". Every invalid output keeps its tokens; whether it becomes a
designer row is `selfplay.designer_advantage` (designer_advantage.py; docs/selfplay.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.selfplay import prompts, replies
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.timing import Timings

PARSE_ERRORS = ("truncated", "no_code_block", "multiple_code_blocks", "no_class",
                "multiple_classes", "no_hint", "multiple_hints", "empty_hint")
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$", re.MULTILINE)
_PYTHON_TAGS = ("", "python", "python3", "py")
_CLASS = re.compile(r"^class\s+[A-Za-z_]\w*", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ParsedOutput:
  """(source, hint) on success; otherwise `error` is one of PARSE_ERRORS."""

  source: str | None = None
  hint: str | None = None
  error: str | None = None
  detail: str = ""

  @property
  def ok(self) -> bool:
    return self.error is None


def _fail(error: str, detail: str) -> ParsedOutput:
  return ParsedOutput(error=error, detail=detail)


def parse_designer_output(text: str, finish_reason: str = "stop") -> ParsedOutput:
  """Splits a designer reply into its one python block and its hint (rules above)."""
  if finish_reason != "stop":
    return _fail("truncated", f"generation ended with finish_reason={finish_reason!r}")
  text = replies.visible_text(text)
  fences = list(_FENCE.finditer(text))
  if len(fences) % 2:
    line = text.count("\n", 0, fences[-1].start()) + 1
    return _fail("truncated", f"the code fence opened on line {line} is never closed")
  blocks = [(fences[i], fences[i + 1]) for i in range(0, len(fences), 2)]
  if not blocks:
    return _fail("no_code_block", "expected one ```python block")
  if len(blocks) > 1:
    return _fail("multiple_code_blocks", f"found {len(blocks)} fenced blocks, expected one")
  opening, closing = blocks[0]
  if opening.group(1).lower() not in _PYTHON_TAGS:
    return _fail("no_code_block", f"the fenced block is {opening.group(1)!r}, not python")
  source = text[opening.end():closing.start()].strip("\n") + "\n"
  classes = _CLASS.findall(source)
  if not classes:
    return _fail("no_class", "the python block defines no top-level class")
  if len(classes) > 1:
    return _fail("multiple_classes",
                 f"the python block defines {len(classes)} classes ({', '.join(classes)}); "
                 "the contract allows exactly one")
  rest = text[:opening.start()] + text[closing.end():]
  hints, _ = replies.tagged_blocks(rest, "<hint>", "</hint>")
  if not hints:
    if "<hint>" in rest:
      return _fail("truncated", "<hint> is never closed with </hint>")
    return _fail("no_hint", "expected the hint inside <hint>...</hint> after the code block")
  if len(hints) > 1:
    return _fail("multiple_hints", f"found {len(hints)} <hint> blocks, expected one")
  if not hints[0].strip():
    return _fail("empty_hint", "the <hint> block is empty")
  return ParsedOutput(source=source, hint=hints[0].strip())


def format_designer_output(source: str, hint: str) -> str:
  """A designer reply that `parse_designer_output` reads back as (source, hint): the output
  format the designer prompt asks for (one python block, then the <hint>)."""
  body = source.strip("\n")
  return f"```python\n{body}\n```\n\n<hint>{hint.strip()}</hint>"


@dataclasses.dataclass(frozen=True)
class DesignRequest:
  """One designer prompt: the category to target and its grounding."""

  index: int  # position in the refresh (env slot)
  category: str
  passage_id: str | None
  passage: str | None
  memory: tuple[prompts.MemoryView, ...] = ()
  passage_origin: str | None = None  # where the passage comes from, named in the prompt


@dataclasses.dataclass
class DesignerSample:
  """One designer generation: its tokens for training and what came of it."""

  index: int
  category: str
  passage_id: str | None
  prompt_ids: list[int]
  output_ids: list[int]
  logprobs: list[float]
  text: str
  source: str | None = None
  hint: str | None = None
  error: str | None = None  # "parse/<rule>" or "sandbox/<rule>"; None when valid
  detail: str = ""
  max_turns: int | None = None  # the environment's own cap, from validation

  @property
  def valid(self) -> bool:
    return self.error is None


def _sandbox_rule(reason: str | None) -> str:
  """A short rule name for counting: the text before the first ':' of the reason."""
  head = (reason or "invalid").split(":", 1)[0].strip()
  return re.sub(r"[^A-Za-z0-9_]+", "_", head).strip("_").lower() or "invalid"


def fitted_prompt(formatter: ChatFormatter, req: DesignRequest, setting: str,
                  max_tokens: int | None, reward: str = "hint_regret",
                  style: str = "full") -> list[int]:
  """Prompt ids within `max_tokens`: drops memory entries, then halves the passage."""
  memory, passage = list(req.memory), req.passage
  while True:
    ids = formatter.prompt_ids(
        prompts.designer_messages(req.category, passage, memory, setting, reward,
                                  req.passage_origin, style))
    if max_tokens is None or len(ids) <= max_tokens:
      return ids
    if memory:
      memory.pop()
    elif passage and len(passage) > 64:
      passage = passage[:len(passage) // 2]
    else:
      raise ValueError(f"the designer prompt needs {len(ids)} tokens without memory or passage, "
                       f"more than the {max_tokens} the engine's cache leaves (config."
                       "engine.max_cache_len minus config.sampling.designer.max_new_tokens)")


def generate_designs(engine, pool, formatter: ChatFormatter, requests: Sequence[DesignRequest],
                     params: SamplingParams, *, setting: str, step: int, timings: Timings,
                     max_prompt_tokens: int | None = None, reward: str = "hint_regret",
                     style: str = "full") -> list[DesignerSample]:
  """Samples one environment per request, parses and validates them (batched).

  Prompts (of `style`, prompts.DESIGNER_PROMPTS) longer than `max_prompt_tokens` are
  shortened by `fitted_prompt`.
  """
  samples: dict[tuple, DesignerSample] = {}
  for req in requests:
    cid = ("designer", step, req.index)
    prompt_ids = fitted_prompt(formatter, req, setting, max_prompt_tokens, reward, style)
    samples[cid] = DesignerSample(req.index, req.category, req.passage_id, prompt_ids, [], [], "")
    seed = params.seed + req.index
    with timings.phase("generate_s"):
      engine.submit(Request(cid, prompt_ids, dataclasses.replace(params, seed=seed)))
  finish = {}
  while len(finish) < len(samples):
    with timings.phase("generate_s"):
      done = engine.poll()
    for completion in done:
      sample = samples[completion.conversation_id]
      sample.output_ids = list(completion.tokens)
      sample.logprobs = list(completion.logprobs)
      finish[completion.conversation_id] = completion.finish_reason
      engine.release(completion.conversation_id)
  to_validate = []
  stops = set(params.stop_token_ids)
  for cid, sample in samples.items():
    ids = sample.output_ids
    sample.text = formatter.tokenizer.decode(ids[:-1] if ids and ids[-1] in stops else ids)
    parsed = parse_designer_output(sample.text, finish[cid])
    if parsed.ok:
      sample.source, sample.hint = parsed.source, parsed.hint
      to_validate.append(sample)
    else:
      sample.error, sample.detail = f"parse/{parsed.error}", parsed.detail
  if to_validate:
    with timings.phase("sandbox_s"):
      results = pool.validate([s.source for s in to_validate])
    for sample, result in zip(to_validate, results, strict=True):
      if result.valid:
        sample.max_turns = result.max_turns
      else:
        sample.error = f"sandbox/{_sandbox_rule(result.reason)}"
        sample.detail = result.reason or ""
  return sorted(samples.values(), key=lambda s: s.index)
