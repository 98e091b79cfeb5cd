"""Loaders for benchmarks whose data users bring, in their public formats.

  aime  JSONL, one problem a line: "problem", "answer" (an integer; "033" is 33), optional
        "id". Answer: the last \\boxed{} (or answer line), normalised, as an integer.
        Metric avg@k: the mean over items of each item's share of correct samples.
  gpqa  The GPQA CSV ("Question", "Correct Answer", "Incorrect Answer 1".."3", optional
        "Record ID"). Options are shuffled per item with a fixed seed (SHUFFLE_SEED and
        the row); the reply's option letter (extract.choice_letter) must be the correct one.
Errors name the file, the line or row and the field.
"""

from __future__ import annotations

import csv
import json
import pathlib
import random
from collections.abc import Sequence

from spade_jax.eval import extract
from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite, mean_record

SHUFFLE_SEED = 0
LETTERS = "ABCD"
MATH_INSTRUCTION = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
CHOICE_INSTRUCTION = ("\n\nAnswer with the letter of the correct option, within \\boxed{} "
                      "(for example \\boxed{A}).")


def read_jsonl(path: str | pathlib.Path, required: Sequence[str]) -> list[dict]:
  rows = []
  for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError as exc:
      raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
    missing = [k for k in required if not isinstance(row, dict) or k not in row]
    if missing:
      raise ValueError(f"{path}:{n}: missing field(s) {missing}")
    rows.append(row)
  return rows


def _require_data(data: str | None, suite: str) -> str:
  if not data:
    raise ValueError(f"suite {suite!r} needs its data file: --data {suite}=PATH")
  if not pathlib.Path(data).is_file():
    raise FileNotFoundError(f"{suite}: data file {data} does not exist")
  return data


class Aime(Suite):
  name = "aime"
  metric = "avg@k"
  sampling = Sampling(max_new_tokens=16384, samples=32)

  def __init__(self, data: str | None):
    self.path = _require_data(data, self.name)

  def items(self, limit: int | None = None) -> list[Item]:
    out = []
    for n, row in enumerate(read_jsonl(self.path, ("problem", "answer")), 1):
      answer = extract.integer_answer(str(row["answer"]))
      if answer is None:
        raise ValueError(f"{self.path}:{n}: 'answer' must be an integer, got {row['answer']!r}")
      out.append(Item(str(row.get("id", f"aime/{n - 1}")),
                      ({"role": "user", "content": str(row["problem"]) + MATH_INSTRUCTION},),
                      {"answer": answer}))
    return out[:limit]

  def score(self, items, responses, pool=None) -> list[ItemRecord]:
    records = []
    for item, replies in zip(items, responses, strict=True):
      answers = [extract.integer_answer(extract.math_answer(r)) for r in replies]
      records.append(mean_record(item, replies, answers,
                                 [float(a == item.reference["answer"]) for a in answers]))
    return records


class Gpqa(Suite):
  name = "gpqa"
  metric = "accuracy"
  sampling = Sampling(max_new_tokens=16384)
  FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
            "Incorrect Answer 3")

  def __init__(self, data: str | None):
    self.path = _require_data(data, self.name)

  def items(self, limit: int | None = None) -> list[Item]:
    with open(self.path, newline="", encoding="utf-8") as f:
      reader = csv.DictReader(f)
      missing = [k for k in self.FIELDS if k not in (reader.fieldnames or ())]
      if missing:
        raise ValueError(f"{self.path}: missing column(s) {missing}")
      rows = list(reader)
    out = []
    for n, row in enumerate(rows):
      options = [row[k].strip() for k in self.FIELDS[1:]]
      if not all(options) or not row["Question"].strip():
        raise ValueError(f"{self.path}: row {n + 2}: empty question or option")
      order = list(range(4))
      random.Random(f"{SHUFFLE_SEED}/{n}").shuffle(order)
      text = row["Question"].strip() + "\n\n" + "\n".join(
          f"{LETTERS[i]}) {options[j]}" for i, j in enumerate(order))
      out.append(Item(str(row.get("Record ID") or f"gpqa/{n}"),
                      ({"role": "user", "content": text + CHOICE_INSTRUCTION},),
                      {"answer": LETTERS[order.index(0)]}))
    return out[:limit]

  def score(self, items, responses, pool=None) -> list[ItemRecord]:
    records = []
    for item, replies in zip(items, responses, strict=True):
      answers = [extract.choice_letter(r, LETTERS) for r in replies]
      records.append(mean_record(item, replies, answers,
                                 [float(a == item.reference["answer"]) for a in answers]))
    return records
