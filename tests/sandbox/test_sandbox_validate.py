"""Validator rules, FakePool parity with the real pool, and the check CLI."""

import json
import os
import subprocess
import sys

from spade_jax.sandbox import contract, validate
from spade_jax.sandbox.fake import FakePool
from tests.sandbox.sandbox_procs import VALIDATION_SEED

CONSTANT = """
class Same:
  def reset(self, seed=None):
    return "Say yes.", {}

  def step(self, action):
    return "Done.", float(action == "yes"), True, False, {}
"""


def test_static_rules_name_the_line():
  cases = {
      "import json\nimport socket\n": ("allowed-imports", 2),
      "from os import path\n": ("allowed-imports", 1),
      "class A:\n  def reset(self, seed=None):\n    return eval('1'), {}\n  def step(self, a):\n"
      "    pass\n": ("forbidden-names", 3),
      "class A:\n  def reset(self, seed=None):\n    return ().__class__.__base__.__subclasses__()"
      "\n  def step(self, a):\n    pass\n": ("forbidden-names", 3),
      "class A:\n  def reset(self, seed=None):\n    pass\n": ("no method step", 1),
      "class A:\n  def reset(self):\n    pass\n  def step(self, a):\n    pass\n": ("seed", 2),
      "class A:\n  pass\nclass B:\n  pass\n": ("exactly one class", None),
      "x = (\n": ("syntax", 1),
      "x = " + "+".join(["1"] * 13000): ("cannot be parsed", None),
      "x = " + "-" * 30000 + "1": ("cannot be parsed", None),
      "x = 1\0": ("null bytes", None),
      "#" * (contract.MAX_SOURCE_CHARS + 1): ("characters", None),
  }
  for source, (needle, line) in cases.items():
    result = validate.static_check(source)
    assert not result.valid and needle in result.reason and result.line == line, result
  assert validate.static_check(contract.EXAMPLE_ENV).valid


def test_contract_text_states_the_limits():
  for value in (contract.MAX_OBS_CHARS, contract.MAX_TURNS_CAP, "reset(self, seed", "tools",
                f'starting with "{contract.INSTRUCTION_PREFIX}"'):
    assert str(value) in contract.CONTRACT_TEXT
  for module in contract.ALLOWED_IMPORTS - {"__future__"}:
    assert module in contract.CONTRACT_TEXT


def test_fake_pool_matches_the_sandbox(pool):
  sources = [contract.EXAMPLE_ENV, CONSTANT, "x = 1\n",
             contract.EXAMPLE_ENV.replace("1.0, True", "float('nan'), True")]
  fake = FakePool(max_turns=8, validation_seed=VALIDATION_SEED)
  assert fake.validate(sources) == pool.validate(sources)
  assert fake.validate([CONSTANT]) != FakePool(check_constant=False).validate([CONSTANT])
  episodes = [(i, s, 7) for i, s in enumerate(sources)]
  assert fake.reset(episodes) == pool.reset(episodes)
  for action in ("3", "x", "10", "12", "13", "13", "13"):  # until every episode ends
    batch = [(i, action) for i in range(len(sources))]
    assert fake.step(batch) == pool.step(batch)
  pool.close_episodes(range(len(sources)))


def test_check_cli(tmp_path):
  good = tmp_path / "good.py"
  good.write_text(contract.EXAMPLE_ENV.replace("self.turns = 0",
                                               "self.turns = 0\n    print('LEAK')"))
  noisy = tmp_path / "noisy.py"
  noisy.write_text("import os\nos.write(1, b'LEAK')\nprint('LEAK')\nclass A:\n  pass\n")
  actions = tmp_path / "actions.txt"
  actions.write_text("10\n5\n7\n8\n9\n")
  cmd = [sys.executable, "-m", "spade_jax.sandbox.check", str(good), str(noisy), str(good),
         "--seed", "3", "--actions", str(actions)]
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert done.returncode == 0, done.stderr
  assert "LEAK" not in done.stdout
  lines = [json.loads(line) for line in done.stdout.splitlines()]
  assert [line["file"] for line in lines] == [str(good), str(noisy), str(good)]
  assert lines[0] == lines[2]
  assert lines[0]["valid"] and lines[0]["reason"] is None
  assert lines[0]["observations"][-1] == "Correct!" and lines[0]["return"] == 1.0
  assert lines[0]["rewards"] == [0.0, 0.0, 0.0, 1.0] and lines[0]["terminated"]
  assert not lines[1]["valid"] and "line 1" in lines[1]["reason"]
  usage = subprocess.run([sys.executable, "-m", "spade_jax.sandbox.check"], capture_output=True,
                         timeout=60)
  assert usage.returncode == 2


def test_difficulty_levels_are_checked_in_the_sandbox(pool):
  leveled = contract.EXAMPLE_ENV.replace(
      "  max_turns = 6\n", "  max_turns = 6\n  difficulty_levels = 3\n  difficulty = 0\n")
  sources = [leveled, leveled.replace("levels = 3", "levels = 1"),
             leveled.replace("levels = 3", "levels = '3'"),
             leveled.replace("levels = 3", f"levels = {contract.MAX_DIFFICULTY_LEVELS + 1}")]
  fake = FakePool(max_turns=8, validation_seed=VALIDATION_SEED).validate(sources)
  real = pool.validate(sources)
  assert fake == real
  assert real[0].valid and real[0].difficulty_levels == 3
  assert FakePool(max_turns=8).validate([contract.EXAMPLE_ENV])[0].difficulty_levels is None
  for result in real[1:]:
    assert not result.valid
    assert result.reason.startswith("types: difficulty_levels must be an int from 2 to 10")
  assert "difficulty_levels" in contract.CONTRACT_TEXT
