"""Reasoning Gym, hard tier: procedurally generated items scored by each dataset's own scorer.

Data: the `reasoning-gym` package (pinned), generated offline. The hard tier is the fixed
list `HARD_DATASETS`, two datasets for each of four cognitive-skill categories, each at
the top level of every attribute of its own curriculum (`curriculum.set_attr_level(a,
max)`), `ITEMS_PER_DATASET` items from the fixed seed `SEED` (+ the dataset's index).
Item ids are "<dataset>/<index>". The reply's answer is the last `<answer>...</answer>`
after the thinking block (`extract.tagged`, Reasoning Gym's own convention); the dataset's
`score_answer` scores it (a missing answer scores 0). Metric: win rate, the share of
items scored 1 (per category in `extra`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from reasoning_gym import factory

from spade_jax.eval import extract, stats
from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite, mean_record

HARD_DATASETS = {  # category -> datasets (Reasoning Gym's own module categories)
    "algorithmic": ("word_sorting", "spell_backward"),
    "cognition": ("color_cube_rotation", "figlet_font"),
    "games": ("mini_sudoku", "maze"),
    "logic": ("knights_knaves", "syllogism"),
}
ITEMS_PER_DATASET = 50
SEED = 20250
INSTRUCTION = ("\n\nThink it through, then give your final answer inside <answer></answer> "
               "tags, exactly in the format the question asks for.")


@functools.cache
def hard_dataset(name: str, index: int):
  """The dataset `name` with every curriculum attribute at its top level."""
  curriculum = factory.create_curriculum(name)
  for attr, definition in curriculum.attributes.items():
    curriculum.set_attr_level(attr, len(definition.levels) - 1)
  config = curriculum.generate_configuration({"seed": SEED + index, "size": ITEMS_PER_DATASET})
  if hasattr(config, "validate"):
    config.validate()
  return factory.DATASETS[name][0](config=config)


_DATASETS = [(cat, name) for cat, names in HARD_DATASETS.items() for name in names]
_INDEX = {name: i for i, (_, name) in enumerate(_DATASETS)}


def _item(name: str, k: int) -> Item:
  entry = hard_dataset(name, _INDEX[name])[k]
  return Item(f"{name}/{k}", ({"role": "user", "content": entry["question"] + INSTRUCTION},),
              {"dataset": name, "category": _DATASETS[_INDEX[name]][0], "index": k,
               "answer": entry["answer"]})


class ReasoningGym(Suite):
  name = "reasoning_gym"
  metric = "win_rate"
  sampling = Sampling(max_new_tokens=4096)

  def items(self, limit: int | None = None) -> list[Item]:
    # Interleaved (item 0 of every dataset, then item 1, ...) so a limit covers them all.
    order = [(name, k) for k in range(ITEMS_PER_DATASET) for _, name in _DATASETS]
    return [_item(name, k) for name, k in order[:limit]]

  def lookup(self, ids) -> dict[str, Item]:
    found = {}
    for item_id in ids:
      name, _, k = item_id.rpartition("/")
      if name in _INDEX and k.isdigit() and int(k) < ITEMS_PER_DATASET:
        found[item_id] = _item(name, int(k))
    return found

  def score(self, items: Sequence[Item], responses, pool=None) -> list[ItemRecord]:
    records = []
    for item, replies in zip(items, responses, strict=True):
      ref = item.reference
      dataset = hard_dataset(ref["dataset"], _INDEX[ref["dataset"]])
      entry = dataset[ref["index"]]
      answers = [extract.tagged(r) for r in replies]
      scores = [0.0 if a is None else float(dataset.score_answer(a, entry)) for a in answers]
      record = mean_record(item, replies, answers, scores)
      record.score = float(sum(s >= 1.0 for s in scores) / len(scores))
      records.append(record)
    return records

  def summarize(self, records: Sequence[ItemRecord]) -> stats.Summary:
    summary = super().summarize(records)
    by_cat: dict[str, list[float]] = {}
    for r in records:
      by_cat.setdefault(r.reference["category"], []).append(r.score)
    summary.extra.update({f"win_rate/{c}": stats.mean_stderr(v)[0] for c, v in by_cat.items()})
    return summary
