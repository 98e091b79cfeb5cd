"""What a suite is: items, how to answer them, how to score the answers.

A suite turns its data into `Item`s. Single-turn suites give each item chat `messages`
and score the sampled replies with `score`; multi-turn suites (the agent acts over
several turns: BFCL, the held-out seed games) also override `play`. Every scored item
becomes an `ItemRecord`, written as one JSON line; `summarize` reduces the records to a
`stats.Summary`. The registry maps suite names to factories (suites/__init__.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from spade_jax.eval import stats


@dataclasses.dataclass(frozen=True)
class Sampling:
  """A suite's generation defaults (flags override them)."""

  max_new_tokens: int = 2048
  temperature: float = 0.6
  top_p: float = 0.95
  top_k: int = 0
  samples: int = 1


@dataclasses.dataclass(frozen=True)
class Item:
  id: str
  messages: tuple[dict, ...] = ()  # the chat prompt of single-turn suites
  reference: Any = None  # what the scorer needs (JSON-ready: it is written out)


@dataclasses.dataclass
class ItemRecord:
  """One scored item: every response, its extracted answer and score, the item's score."""

  id: str
  prompt: Any
  responses: list
  answers: list
  scores: list[float]
  score: float | None  # None: unscored (sandbox failure), left out of the summary
  reference: Any = None
  details: list = dataclasses.field(default_factory=list)  # per response, e.g. test outcomes

  def to_json(self, suite: str) -> dict:
    return {"suite": suite, **dataclasses.asdict(self)}


class Suite:
  """Base class; subclasses set `name`, `metric`, `sampling` and implement items / score."""

  name: str = ""
  metric: str = "accuracy"
  sampling: Sampling = Sampling()
  needs_pool: bool = False  # scoring runs code in the sandbox pool
  prediction_key: str = "responses"  # the field of a predictions line the scorer reads
  not_playable: str = ""  # why `run` cannot play the suite here ("" = it can)

  def items(self, limit: int | None = None) -> list[Item]:
    """The first `limit` items (all when None), always in the same order."""
    raise NotImplementedError

  def score(self, items: Sequence[Item], responses: Sequence[Sequence[Any]],
            pool=None) -> list[ItemRecord]:
    """Scores each item's responses (same order as `items`)."""
    raise NotImplementedError

  def lookup(self, ids: Sequence[str]) -> dict[str, Item]:
    """{id: item} for the ids that are items of this suite (unknown ids are left out)."""
    wanted = set(ids)
    return {it.id: it for it in self.items(None) if it.id in wanted}

  def check_prediction(self, item: Item, value: Any) -> list:
    """One predictions-file entry as this suite's responses; ValueError names the item."""
    if not isinstance(value, list) or not value or not all(isinstance(r, str) for r in value):
      raise ValueError(f"item {item.id!r}: 'responses' must be a non-empty list of strings")
    return value

  def play(self, items: Sequence[Item], generator, samples: int, pool=None
           ) -> list[list[Any]]:
    """Each item's `samples` responses; single-turn suites sample once from `messages`."""
    return generator.sample([it.messages for it in items], samples)

  def summarize(self, records: Sequence[ItemRecord]) -> stats.Summary:
    scored = [r.score for r in records if r.score is not None]
    value, err = stats.mean_stderr(scored)
    return stats.Summary(self.name, self.metric, value, len(scored), err,
                         no_answer=sum(a is None for r in records for a in r.answers),
                         unscored=len(records) - len(scored))


def mean_record(item: Item, responses: Sequence[Any], answers: Sequence[Any],
                scores: Sequence[float]) -> ItemRecord:
  """The usual record: the item's score is the mean over its samples (avg@k)."""
  return ItemRecord(item.id, list(item.messages), list(responses), list(answers),
                    [float(s) for s in scores], float(sum(scores) / len(scores)) if scores
                    else 0.0, item.reference)


def check_responses(items: Sequence[Item], responses: Sequence[Sequence[Any]]) -> None:
  if len(items) != len(responses):
    raise ValueError(f"{len(items)} items but {len(responses)} response lists")
  for item, rs in zip(items, responses, strict=True):
    if not rs:
      raise ValueError(f"item {item.id!r} has no response")
