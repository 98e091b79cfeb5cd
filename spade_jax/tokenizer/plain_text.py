"""Control-token strings inside untrusted text, kept from becoming control tokens.

A chat is rendered to text by the tokenizer's chat template and then encoded, and the encoder
turns every occurrence of a control token's string ("<|im_start|>", "<tool_call>", any added
token) into that token's id. Text written by a generated environment (observations, tool
specs) would thus become control ids, and an observation could forge a system or assistant
turn in the agent's context. So:

1. before rendering, every control-token string inside untrusted text is replaced by a mark,
   MARK_OPEN + its index in the table + MARK_CLOSE (characters of Unicode's private use
   area, which templates copy through `trim`, `tojson` and string operations unchanged);
2. the template renders the marked text as any other text;
3. the encoder reads the rendered text between marks as before (the template's markup and the
   model's own turns keep their control ids) and each mark as the plain characters of its
   token, cut after the token's first character so that no piece holds a whole token.

The two mark characters are in the table themselves, so untrusted text cannot write a mark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
_MARK = re.compile(f"{MARK_OPEN}([0-9]{{1,6}}){MARK_CLOSE}")  # int() never meets a huge number


def is_markup(token: str) -> bool:
  """Whether an added token can carry chat structure.

  Single characters and whitespace runs, which some tokenizers add as tokens, are ordinary
  text: escaping them would change how benign text is encoded and forge nothing.
  """
  return len(token) > 1 and not token.isspace()


def _alternation(strings: Sequence[str]) -> re.Pattern[str]:
  """Matches any of `strings`, the longest first where several start at one place."""
  if not strings:
    return re.compile(r"(?!)")
  return re.compile("|".join(re.escape(s) for s in sorted(strings, key=len, reverse=True)))


class ControlTokens:
  """The control-token strings of one tokenizer and the marks that stand for them."""

  def __init__(self, tokens: Iterable[str]):
    self.tokens = tuple(sorted({t for t in tokens if is_markup(t)}))
    self._table = (*self.tokens, MARK_OPEN, MARK_CLOSE)
    self._index = {s: i for i, s in enumerate(self._table)}
    self._escaped = _alternation(self._table)
    self._token = _alternation(self.tokens)

  def mark(self, value: Any) -> Any:
    """`value` (a str or JSON-like data, keys included) with control-token strings marked."""
    if isinstance(value, str):
      return self._escaped.sub(lambda m: f"{MARK_OPEN}{self._index[m.group()]}{MARK_CLOSE}",
                               value)
    if isinstance(value, Mapping):
      return {self.mark(k): self.mark(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
      return [self.mark(v) for v in value]
    return value

  def mark_messages(self, messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Every message marked except the assistant's: its turns are the model's own text."""
    return [m if isinstance(m, Mapping) and m.get("role") == "assistant" else self.mark(m)
            for m in messages]

  def _marked(self, match: re.Match[str]) -> str | None:
    index = int(match.group(1))
    return self._table[index] if index < len(self._table) else None

  def unmark(self, text: str) -> str:
    """`text` with each mark replaced by the string it stands for."""
    return _MARK.sub(lambda m: self._marked(m) or m.group(), text)

  def segments(self, text: str) -> Iterator[tuple[str, bool]]:
    """(piece, plain) in order: rendered text between marks (plain False), marked strings
    (plain True). Mark characters that form no mark stay in the rendered text."""
    start = 0
    for match in _MARK.finditer(text):
      marked = self._marked(match)
      if marked is None:
        continue
      yield text[start:match.start()], False
      yield marked, True
      start = match.end()
    yield text[start:], False

  def plain_pieces(self, text: str) -> list[str]:
    """`text` cut after the first character of each control-token occurrence, so that no
    piece holds a whole token and each piece encodes as ordinary text."""
    pieces, start = [], 0
    while (match := self._token.search(text, start)) is not None:
      cut = match.start() + 1
      pieces.append(text[start:cut])
      start = cut
    pieces.append(text[start:])
    return pieces
