"""Answer extraction that does not lie: every function returns None when there is no answer.

A reply is first cut to what follows its last `</think>` (`final_text`): reasoning may
try several answers, only the final text counts, and an unterminated thinking block has
no final text at all. Then:
  * math: the content of the LAST `\\boxed{...}` (braces matched, so `\\boxed{\\frac{1}{2}}`
    is whole), else the last line starting with "answer:" / "final answer:" (any case,
    markdown emphasis allowed); `normalize_math` makes it comparable;
  * tags: the content of the last `<answer>...</answer>` (Reasoning Gym's convention);
  * multiple choice: the letter of the last "answer: X" / `\\boxed{X}` / "(X)" statement;
  * code: the last fenced code block (```python preferred over other languages).
Callers count the Nones: an item without an extractable answer scores 0 and is reported.
"""

from __future__ import annotations

import fractions
import re

from spade_jax.selfplay.replies import tagged_blocks

_THINK_END = "</think>"
# Within one line only: a leading class that took newlines rescanned every following blank
# line from each line start (quadratic in a reply of blank lines).
_ANSWER_LINE = re.compile(
    r"^[ \t*_#>]*(?:final[ \t]+)?answer[ \t]*(?:is)?[ \t]*[:：][ \t]*(.+?)[ \t]*$",
    re.IGNORECASE | re.MULTILINE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FENCE = re.compile(r"```([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def final_text(text: str) -> str | None:
  """The reply after its last `</think>`; None if a `<think>` block is never closed."""
  if _THINK_END in text:
    return text.rsplit(_THINK_END, 1)[1]
  if "<think>" in text:
    return None
  return text


def _closing_braces(text: str) -> dict[int, int]:
  """{index of an unescaped "{": index of the "}" that closes it}, in one forward pass."""
  closing, open_at = {}, []
  for i, char in enumerate(text):
    escaped = text[i - 1:i] == "\\"
    if char == "{" and not escaped:
      open_at.append(i)
    elif char == "}" and not escaped and open_at:
      closing[open_at.pop()] = i
  return closing


def last_boxed(text: str) -> str | None:
  """Content of the last complete `\\boxed{...}` (or `\\fbox{...}`), braces matched.

  The braces are matched once for the whole text, so a reply of many unclosed boxes costs
  one pass, not one scan to the end per box."""
  opens = [m.end() - 1 for m in _BOXED.finditer(text)]
  if not opens:
    return None
  closing = _closing_braces(text)
  for open_at in reversed(opens):
    if open_at in closing:
      return text[open_at + 1:closing[open_at]].strip()
  return None


def last_answer_line(text: str) -> str | None:
  """What follows "answer:" on the last line that states one (emphasis stripped)."""
  matches = _ANSWER_LINE.findall(text)
  if not matches:
    return None
  answer = matches[-1].strip().strip("*_").strip()
  return answer or None


def math_answer(text: str) -> str | None:
  """The final boxed answer, else the final answer line; None when the reply has neither."""
  final = final_text(text)
  if final is None:
    return None
  boxed = last_boxed(final)
  return boxed if boxed is not None else last_answer_line(final)


def tagged(text: str, tag: str = "answer") -> str | None:
  """Stripped content of the last `<tag>...</tag>` of the final text."""
  final = final_text(text)
  if final is None:
    return None
  bodies, _ = tagged_blocks(final, f"<{tag}>", f"</{tag}>")
  return bodies[-1].strip() if bodies else None


_LATEX_DROP = (r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\ ", "$", r"\displaystyle")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mathbf)\s*\{([^{}]*)\}")


def normalize_math(answer: str | None) -> str | None:
  """A canonical string for comparing math answers; None stays None.

  Rules, in order: strip `\\text{}`-style wrappers (keeping their content), spacing and
  sizing commands, dollars, a trailing period and a leading "x =" style variable;
  `\\frac{a}{b}` / `\\dfrac` -> a/b; `^\\circ` and `\\%` are dropped; thousands separators
  in plain numbers are removed (1,000 -> 1000); a number (integer, decimal, a/b) becomes
  its exact reduced value, written as an integer when whole ("2.0", "4/2", "02" -> "2",
  "0.5" -> "1/2"). Anything else is compared as the cleaned text without spaces.
  """
  if answer is None:
    return None
  text = answer.strip()
  text = _TEXT.sub(r"\1", text)
  for token in _LATEX_DROP:
    text = text.replace(token, "")
  text = text.replace(r"^\circ", "").replace(r"^{\circ}", "").replace(r"\%", "").replace("%", "")
  while _FRAC.search(text):
    text = _FRAC.sub(r"(\1)/(\2)", text)
  text = re.sub(r"^[a-zA-Z]\s*=\s*", "", text.strip()).rstrip(".").strip()
  text = text.replace(" ", "")
  if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
    text = text.replace(",", "")
  number = _as_number(text)
  if number is None:
    return text
  if number.denominator == 1:
    return str(number.numerator)
  return f"{number.numerator}/{number.denominator}"


def _as_number(text: str) -> fractions.Fraction | None:
  plain = re.fullmatch(r"\(?(-?\d+(?:\.\d+)?)\)?(?:/\(?(-?\d+(?:\.\d+)?)\)?)?", text)
  if plain is None:
    return None
  num, den = plain.group(1), plain.group(2)
  value = fractions.Fraction(num)
  if den is not None:
    if fractions.Fraction(den) == 0:
      return None
    value /= fractions.Fraction(den)
  return value


def integer_answer(answer: str | None) -> int | None:
  """The normalised answer as an int (AIME answers are integers), None if it is not one."""
  norm = normalize_math(answer)
  if norm is None or not re.fullmatch(r"-?\d+", norm):
    return None
  return int(norm)


def choice_letter(text: str, letters: str = "ABCD") -> str | None:
  """The chosen option: the letter opening the last boxed answer, else the last "answer:"
  line ("B", "(B)", "B. 42", "\\text{B}"), else a reply that is only the letter."""
  final = final_text(text)
  if final is None:
    return None
  opening = re.compile(rf"\(?([{letters}])\)?(?=$|[\s.:,)])")
  for candidate in (last_boxed(final), last_answer_line(final)):
    if candidate is not None:
      found = opening.match(_TEXT.sub(r"\1", candidate).strip())
      return found.group(1) if found else None
  found = re.fullmatch(rf"\(?([{letters}])\)?", final.strip().strip("*.").strip())
  return found.group(1) if found else None


def code_block(text: str, language: str = "python") -> str | None:
  """The last fenced block tagged `language` (else the last fenced block of any tag)."""
  final = final_text(text)
  if final is None:
    return None
  blocks = _FENCE.findall(final)
  if not blocks:
    return None
  tagged_blocks = [code for tag, code in blocks if tag.lower() in (language, language[:2])]
  code = (tagged_blocks or [code for _, code in blocks])[-1]
  return code if code.strip() else None
