"""LiveCodeBench code generation (the release JSONL), run in the sandbox pool.

A line has "question_id", "question_content", "starter_code", "public_test_cases" and
"private_test_cases" (each a JSON list of {"input", "output", "testtype"}, as a JSON string;
private ones may be LiveCodeBench's compressed form, base64 of zlib of a pickled JSON
string, which is unpickled with no globals allowed, so it can only yield plain strings),
and "metadata" (JSON; "func_name" for functional tests). Test types:
  stdin       the program reads `input` on stdin; its stdout must equal `output`
              token by token (whitespace-separated);
  functional  LeetCode style: `Solution().<func_name>(*args)`, args one JSON value a line
              of `input`, must equal json.loads(`output`).
An answer is the last fenced python block; it passes when every test passes (pass@1;
pass@k from the samples as in HumanEval). Every test is one program in the pool.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib

from spade_jax.eval import code_runs, stats
from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite
from spade_jax.eval.suites.user_data import _require_data, read_jsonl
from spade_jax.sandbox.programs import ProgramRun

STDIN_INSTRUCTION = ("Read the inputs from stdin, solve the problem and write the answer to "
                     "stdout. Reply with the complete program in a ```python code block.")
STARTER_INSTRUCTION = ("Use the following starter code and reply with the complete solution "
                       "in a ```python code block.\n\n```python\n{starter}\n```")
_FUNCTIONAL = '''
import json as _json
_args = [_json.loads(_line) for _line in {input!r}.split("\\n") if _line.strip()]
_got = Solution().{func}(*_args)
assert _got == _json.loads({output!r}), "wrong answer"
'''


class _NoGlobals(pickle.Unpickler):
  def find_class(self, module, name):
    raise pickle.UnpicklingError(f"refused global {module}.{name} in test data")


def parse_tests(value, where: str) -> list[dict]:
  """Test cases from a JSON string, a list, or LiveCodeBench's compressed string."""
  if isinstance(value, str):
    try:
      value = json.loads(value)
    except json.JSONDecodeError:
      try:
        raw = zlib.decompress(base64.b64decode(value))
        value = json.loads(_NoGlobals(io.BytesIO(raw)).load())
      except Exception as exc:  # noqa: BLE001 - any failure means the field is unreadable
        raise ValueError(f"{where}: test cases are neither JSON nor LiveCodeBench's "
                         f"compressed form ({type(exc).__name__}: {exc})") from None
  if not isinstance(value, list) or not all(
      isinstance(t, dict) and {"input", "output", "testtype"} <= set(t) and
      t["testtype"] in ("stdin", "functional") for t in value):
    raise ValueError(f"{where}: expected a list of {{'input', 'output', 'testtype': "
                     "'stdin' | 'functional'}}")
  return value


def test_programs(code: str, tests: list[dict], func_name: str | None) -> list[ProgramRun]:
  runs = []
  for t in tests:
    if t["testtype"] == "stdin":
      runs.append(ProgramRun(code, stdin=t["input"], expected_stdout=t["output"]))
    else:
      runs.append(ProgramRun(code + _FUNCTIONAL.format(input=t["input"], output=t["output"],
                                                       func=func_name)))
  return runs


class LiveCodeBench(Suite):
  name = "livecodebench"
  metric = "pass@1"
  sampling = Sampling(max_new_tokens=16384)
  needs_pool = True

  def __init__(self, data: str | None):
    self.path = _require_data(data, self.name)

  def items(self, limit: int | None = None) -> list[Item]:
    fields = ("question_id", "question_content", "public_test_cases", "private_test_cases")
    out = []
    for n, row in enumerate(read_jsonl(self.path, fields)[:limit], 1):
      where = f"{self.path}:{n}"
      tests = (parse_tests(row["public_test_cases"], f"{where}: public_test_cases") +
               parse_tests(row["private_test_cases"], f"{where}: private_test_cases"))
      metadata = row.get("metadata") or {}
      metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
      func = metadata.get("func_name")
      if any(t["testtype"] == "functional" for t in tests) and not func:
        raise ValueError(f"{where}: functional tests need metadata.func_name")
      starter = (row.get("starter_code") or "").strip()
      ask = STARTER_INSTRUCTION.format(starter=starter) if starter else STDIN_INSTRUCTION
      out.append(Item(str(row["question_id"]),
                      ({"role": "user", "content": f"{row['question_content']}\n\n{ask}"},),
                      {"tests": tests, "func_name": func}))
    return out

  def score(self, items, responses, pool=None) -> list[ItemRecord]:
    build = lambda item, code: test_programs(code, item.reference["tests"],
                                             item.reference["func_name"])
    return code_runs.score_code(items, responses, pool, build)

  def summarize(self, records) -> stats.Summary:
    return code_runs.add_pass_at_k(super().summarize(records), records)
