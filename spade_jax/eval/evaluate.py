"""Running suites: items -> responses (engine or a predictions file) -> records -> summaries.

`evaluate` is what `python -m spade_jax.eval run` and the training loop call; `score_file`
is the `score` verb (responses written elsewhere, no model). Both write one JSON line per
item to `out` (when given) and return {suite: Summary}.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spade_jax import storage
from spade_jax.eval import stats
from spade_jax.eval.suite import Item, ItemRecord, Suite
from spade_jax.eval.suites import get_suite
from spade_jax.eval.suites.user_data import read_jsonl

if TYPE_CHECKING:  # the engine (and jax) load only where generation happens
  from spade_jax.eval.generate import Generator


@dataclasses.dataclass(frozen=True)
class SuiteRequest:
  name: str
  data: str | None = None  # the data file of a suite whose data users bring
  limit: int | None = None
  samples: int | None = None  # None: the suite's own default


def write_records(out, suite: Suite, records: Sequence[ItemRecord]) -> None:
  for r in records:
    out.write(json.dumps(r.to_json(suite.name), ensure_ascii=False, default=str) + "\n")
  out.flush()


def evaluate(requests: Sequence[SuiteRequest], generator: Generator, pool=None,
             out: str | os.PathLike | None = None, **overrides) -> dict[str, stats.Summary]:
  """Generates with `generator` (each suite's sampling defaults, then the non-None
  `overrides`: max_new_tokens, temperature, top_p), scores (code in `pool`), writes `out`;
  returns the summaries by suite."""
  summaries = {}
  with _open(out) as sink:
    for req in requests:
      suite = get_suite(req.name, req.data)
      items = suite.items(req.limit)
      samples = req.samples or suite.sampling.samples
      responses = suite.play(items, generator.for_suite(suite.sampling, **overrides), samples,
                             pool)
      records = suite.score(items, responses, pool)
      write_records(sink, suite, records)
      summaries[suite.name] = suite.summarize(records)
  return summaries


def read_predictions(path: str | os.PathLike, key: str = "responses") -> dict[str, Any]:
  """{id: the line's `key` value} from a JSONL file; errors name the file and line."""
  found = {}
  for entry in read_jsonl(path, ("id", key)):
    if str(entry["id"]) in found:
      raise ValueError(f"{path}: id {entry['id']!r} appears twice")
    found[str(entry["id"])] = entry[key]
  return found


def score_predictions(suite: Suite, predictions: dict[str, Any], pool=None
                      ) -> list[ItemRecord]:
  """Scores the suite's items that `predictions` answers (unknown ids are an error)."""
  items = suite.lookup(list(predictions))
  unknown = sorted(set(predictions) - set(items))
  if unknown:
    raise ValueError(f"{len(unknown)} prediction ids are not items of {suite.name}: "
                     f"{unknown[:5]}")
  chosen: list[Item] = [items[i] for i in predictions]
  responses = [suite.check_prediction(it, predictions[it.id]) for it in chosen]
  return suite.score(chosen, responses, pool)


def score_file(name: str, predictions_path, data: str | None = None, pool=None,
               out=None) -> dict[str, stats.Summary]:
  suite = get_suite(name, data)
  records = score_predictions(suite, read_predictions(predictions_path, suite.prediction_key),
                              pool)
  with _open(out) as sink:
    write_records(sink, suite, records)
  return {suite.name: suite.summarize(records)}


def _open(path):
  """The JSONL sink: `path`, or os.devnull when no file was asked for."""
  return storage.open_file(os.devnull if path is None else path, "w")  # local or gs://
