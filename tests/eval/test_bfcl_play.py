"""BFCL multi-turn played through an engine that replies with the ground-truth calls in
Qwen3's <tool_call> format: the play loop, the reply parser, the backends and the scorer
together give 100 %; an engine that never calls a tool gives 0 %."""

import ast
import json

from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.eval.generate import Generator
from spade_jax.eval.suites import bfcl_data, get_suite
from spade_jax.tokenizer import load_tiny


def _as_json_call(call: str, case: dict) -> dict:
  node = ast.parse(call, mode="eval").body
  docs = {d["name"]: d for cls in case["involved_classes"] for d in bfcl_data.function_docs(cls)}
  order = list(docs[node.func.id]["parameters"]["properties"])
  args = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
  args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
  return {"name": node.func.id, "arguments": args}


def _script(case: dict) -> list[str]:
  """Per model reply: the turn's ground-truth calls, then a plain answer ending the turn."""
  replies = []
  for turn in case["ground_truth"]:
    if turn:
      replies.append("".join(f"<tool_call>\n{json.dumps(_as_json_call(c, case))}\n</tool_call>"
                             for c in turn))
    replies.append("Done.")
  return replies


def _play(ids, scripted: bool):
  tokenizer = load_tiny()
  suite = get_suite("bfcl_v4_multi_turn")
  items = suite.lookup(ids)
  items = [items[i] for i in ids]
  cases = {it.id: bfcl_data.cases(it.reference["category"]) for it in items}
  cases = {i: next(c for c in cs if c["id"] == i) for i, cs in cases.items()}
  scripts, calls = {}, {}

  def reply(cid, history, params):
    case_id = items[cid[2]].id
    scripts.setdefault(cid, _script(cases[case_id]) if scripted else ["Done."] * 99)
    n = calls[cid] = calls.get(cid, -1) + 1
    return tokenizer.encode(scripts[cid][n]) + [tokenizer.eos_id]

  engine = FakeEngine(reply, max_cache_len=1 << 20)
  generator = Generator(engine, tokenizer, SamplingParams(max_new_tokens=2048), 1 << 20,
                        progress=False)
  responses = suite.play(items, generator, 1)
  return suite.summarize(suite.score(items, responses)), responses


IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_miss_func_0",
       "multi_turn_miss_param_3", "multi_turn_long_context_2"]


def test_ground_truth_play_scores_full():
  summary, responses = _play(IDS, scripted=True)
  assert summary.value == 1.0, responses
  assert responses[0][0][0][0][0] == "cd(folder='document')"


def test_no_tool_calls_score_zero():
  summary, _ = _play(IDS[:2], scripted=False)
  assert summary.value == 0.0 and summary.n == 2
