"""The play command on the seed tool environments with hand-written Qwen3 replies.

Real parser, real chat formatting (the bundled tokenizer and its Qwen3 template) and the
real sandbox pool. The replies carry thinking blocks, two calls in one reply, malformed
JSON and a call to an undeclared tool; the environments must receive exactly the oracle's
calls, as dicts, and reach their full return.
"""

import json
import pathlib
import subprocess
import sys

import pytest

from spade_jax.envs.library import SEEDS_DIR, load_seed_library
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.selfplay.play import play, split_replies
from spade_jax.tokenizer import load_tokenizer

TOOL_SEEDS = load_seed_library(kind="tool_use")
BAD_JSON = '<think>\nQuick.\n</think>\n\n<tool_call>\n{"name": "x", "arguments": {\n</tool_call>'
UNDECLARED = '<tool_call>\n{"name": "format_disk", "arguments": {}}\n</tool_call>'


def oracle(source: str) -> list:
  """oracle_actions() of the trusted seed source for seed 3, computed in this process."""
  namespace = {}
  exec(compile(source, "<seed>", "exec"), namespace)  # noqa: S102 (trusted seed library)
  (cls,) = [v for v in namespace.values() if isinstance(v, type)]
  env = cls()
  env.reset(3)
  return env.oracle_actions()


def as_replies(actions: list) -> list[str]:
  """Qwen3 replies: the first two calls in one reply, a thinking block before each reply."""
  blocks = [f"<tool_call>\n{json.dumps(a)}\n</tool_call>" if isinstance(a, dict) else a
            for a in actions]
  if isinstance(actions[0], dict) and isinstance(actions[1], dict):
    blocks[:2] = ["\n".join(blocks[:2])]
  return [BAD_JSON, UNDECLARED] + [f"<think>\nStep {i}.\n</think>\n\n{b}"
                                   for i, b in enumerate(blocks)]


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(num_workers=1, max_turns=16) as p:
    yield p


@pytest.mark.parametrize("seed_env", TOOL_SEEDS, ids=[s.name for s in TOOL_SEEDS])
def test_oracle_replies_reach_the_full_return_through_parser_and_sandbox(pool, seed_env):
  actions = oracle(seed_env.source)
  out = play(pool, load_tokenizer("tiny"), seed_env.source, as_replies(actions),
             setting="tool_use", seed=3)
  assert out["error"] is None and out["terminated"], out
  assert out["return"] >= 0.99, out
  bad, undeclared = out["turns"][:2]
  assert bad["received"] == [] and "its JSON is malformed" in bad["errors"][0]
  assert undeclared["received"] == [] and "no tool named 'format_disk'" in undeclared["errors"][0]
  received = [a for turn in out["turns"][2:] for a in turn["received"]]
  assert received == actions
  assert len(out["turns"][2]["received"]) == 2  # two calls in one reply, two tool turns
  assert len(out["turns"][2]["observations"]) == 2


def test_command_line_prints_one_json_line(tmp_path):
  seed_env = next(s for s in TOOL_SEEDS if s.name == "bank")
  path = next(p for p in SEEDS_DIR.rglob("bank.py"))
  replies = tmp_path / "replies.txt"
  replies.write_text("\n=====\n".join(as_replies(oracle(seed_env.source))) + "\n")
  assert len(split_replies(replies.read_text())) == 5
  root = pathlib.Path(__file__).parents[2]
  done = subprocess.run([sys.executable, "-m", "spade_jax.selfplay.play", str(path),
                         "--replies", str(replies), "--setting", "tool_use", "--seed", "3",
                         "--hint"], capture_output=True, text=True, cwd=root, timeout=120)
  assert done.returncode == 0, done.stderr
  (line,) = done.stdout.splitlines()
  out = json.loads(line)
  assert out["arm"] == "hint" and out["return"] >= 0.99 and out["tools"][0] == "list_accounts"
