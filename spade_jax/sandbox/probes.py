"""Degenerate policies the validator plays: none of them may win an environment.

Each probe is a policy that needs no reasoning about the puzzle: a sound environment pays
its mean return below contract.DEGENERATE_MAX_RETURN, a hackable one pays more. The host
computes every reply from what it saw (the observations of the episode's records):
  empty        the empty reply, every turn;
  example      the example action the first observation quotes (`...`, "...", 'for
               example ...'), every turn; no episode when it quotes none;
  stuffed      one reply listing every candidate answer: the integers 0..999, yes/no,
               directions, letters, and every word of the first observation;
  echo         the latest observation, sent back as the reply;
  alternating  two replies in turn: the two options the first observation offers ("X or
               Y"), else yes and no.
"""

from __future__ import annotations

import re

from spade_jax.sandbox import contract

PROBES = ("empty", "example", "stuffed", "echo", "alternating")
NAMES = {"empty": "empty-replies", "example": "example-action", "stuffed": "stuffed-reply",
         "echo": "echo", "alternating": "alternating-replies"}

_EXAMPLE = (re.compile(r"`([^`\n]{1,80})`"), re.compile(r'"([^"\n]{1,80})"'),
            re.compile(r"(?:for example|for instance|e\.g\.|such as|example:)[:,]?\s*"
                       r"([^\n.;)]{1,80})", re.IGNORECASE),
            re.compile(r"'([^'\n]{1,80})'"))
_WORD = re.compile(r"[A-Za-z0-9_+-]+")
_OPTIONS = re.compile(r"\b([A-Za-z0-9_+-]+) or ([A-Za-z0-9_+-]+)\b")
_GUESSES = ("yes no true false left right up down north south east west a b c d "
            "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z")


def example_action(observation: str) -> str | None:
  """The example action a first observation quotes: `...`, "...", 'for example ...'."""
  for pattern in _EXAMPLE:
    found = pattern.search(observation)
    if found and found.group(1).strip():
      return found.group(1).strip()
  return None


def stuffed_reply(observation: str) -> str:
  """One reply listing many candidate answers, cut like an agent's reply."""
  words = dict.fromkeys(_WORD.findall(observation))
  text = " ".join([*map(str, range(contract.STUFFED_NUMBERS)), _GUESSES, *words])
  return text[: contract.MAX_ACTION_CHARS]


def alternatives(observation: str) -> tuple[str, str]:
  """The first two different options the observation offers as "X or Y", else yes and no."""
  for first, second in _OPTIONS.findall(observation):
    if first != second:
      return first, second
  return "yes", "no"


def probe_action(policy: str, first_observation: str, last_observation: str,
                 turn: int) -> str | None:
  """The reply of `policy` on turn `turn` (0-based); None: the policy has nothing to say."""
  if policy == "empty":
    return ""
  if policy == "example":
    return example_action(first_observation)
  if policy == "stuffed":
    return stuffed_reply(first_observation)
  if policy == "echo":
    return last_observation
  return alternatives(first_observation)[turn % 2]
