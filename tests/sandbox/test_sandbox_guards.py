"""Validator guards: broken and hackable environments are rejected under their named rule."""

import random

import pytest

from spade_jax.sandbox import contract, schema, trial
from spade_jax.sandbox.fake import FakePool
from spade_jax.sandbox.probes import alternatives, example_action, stuffed_reply
from spade_jax.sandbox.schema import sample_value
from tests.sandbox.sandbox_procs import VALIDATION_SEED

DRAW = trial.Draw.of(VALIDATION_SEED)  # the seeds FakePool(validation_seed=VALIDATION_SEED) plays

# A sound tool environment: two questions in turn (look the price up, answer it, then the
# price of two); oracle included.
SHOP = '''\
import json
import random


class Shop:
  max_turns = 6
  tools = [{"type": "function", "function": {
      "name": "get_price", "description": "Price of an item in cents.",
      "parameters": {"type": "object", "properties": {
          "item": {"type": "string"}, "unit": {"type": "string", "enum": ["cent", "euro"]},
          "tags": {"type": "array", "items": {"type": "integer"}}}, "required": ["item"]}}}]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.item = rng.choice(["apple", "pear", "plum", "fig"])
    self.price = rng.randint(10, 999)
    self.count = 1
    return f"User: How much is one {self.item}? Answer with the number of cents.", {}

  def step(self, action):
    if isinstance(action, dict):
      if action["name"] != "get_price":
        return json.dumps({"error": "unknown tool"}), 0.0, False, False, {}
      found = action["arguments"]["item"] == self.item
      return json.dumps({"price": self.price if found else None}), 0.0, False, False, {}
    done = action.strip() == str(self.price * self.count)
    if not done:
      return "No.", 0.0, False, False, {}
    if self.count == 1:
      self.count = 2
      return f"Right.\\nUser: And how much are two {self.item}s?", 0.5, False, False, {}
    return "Right.\\nUser: Thanks!", 0.5, True, False, {}

  def oracle_actions(self):
    return [{"name": "get_price", "arguments": {"item": self.item}}, str(self.price),
            str(2 * self.price)]
'''

# A tool environment that poses one instruction only (its closing "User: Thanks!" ends the
# episode and asks for nothing).
ONE_REQUEST = '''\
import json
import random


class Price:
  max_turns = 6
  tools = [{"type": "function", "function": {
      "name": "get_price", "description": "Price of an item in cents.",
      "parameters": {"type": "object", "properties": {"item": {"type": "string"}},
                     "required": ["item"]}}}]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.item = rng.choice(["apple", "pear", "plum", "fig"])
    self.price = rng.randint(10, 999)
    self.request = f"How much is one {self.item}? Answer with the number of cents."
    return f"User: {self.request}", {}

  def step(self, action):
    if isinstance(action, dict):  # the tool result repeats the request: still one
      found = action["arguments"].get("item") == self.item
      result = json.dumps({"price": self.price if found else None})
      return f"{result}\\nUser: {self.request}", 0.0, False, False, {}
    if action.strip() != str(self.price):
      return "No.", 0.0, False, False, {}
    return "Right.\\nUser: Thanks!", 1.0, True, False, {}

  def oracle_actions(self):
    return [{"name": "get_price", "arguments": {"item": self.item}}, str(self.price)]
'''


def reason(source, **rules):
  (result,) = FakePool(validation_seed=VALIDATION_SEED, **rules).validate([source])
  return result.reason


def test_a_sound_tool_environment_passes_every_guard():
  assert reason(SHOP, require_tools=True, require_oracle=True) is None


def test_tool_use_requires_tools_with_valid_schemas():
  no_tools = SHOP.replace("  tools = [", "  _tools = [")
  assert reason(no_tools) is None  # the games setting does not ask for tools
  assert reason(no_tools, require_tools=True).startswith("tools: a tool-use environment")
  bad = SHOP.replace('"items": {"type": "integer"}', '"items": {"type": "int"}')
  assert reason(bad).startswith("tools: tools[0].function.parameters.properties.tags.items")
  ref = SHOP.replace('"unit": {"type"', '"unit": {"$ref": "#/x", "type"')
  assert "'$ref' is not supported" in reason(ref)


def test_an_environment_that_ignores_its_tools_is_rejected():
  ignores = SHOP.replace("    if isinstance(action, dict):",
                         "    action = str(action)\n    if isinstance(action, dict):")
  assert reason(ignores).startswith("tools-ignored: a schema-valid call of 'get_price'")


def test_an_environment_that_crashes_on_a_schema_valid_call_is_rejected():
  crashes = SHOP.replace('found = action["arguments"]["item"] == self.item',
                         'found = action["arguments"]["unit"] == "kg"\n      1 / 0')
  why = reason(crashes)
  assert why.startswith(f"tool-calls: step 1 of the tool-call trial run (seed {DRAW.seeds[0]}, "
                        "action {")
  assert "ZeroDivisionError" in why


def test_a_degenerate_policy_that_wins_marks_the_environment_hackable():
  stuffed = SHOP.replace('done = action.strip() == str(self.price * self.count)',
                         'done = str(self.price * self.count) in action.split()')
  stuffed = stuffed.replace("self.price = rng.randint(10, 999)", "self.price = rng.randint(10, 50)")
  assert reason(stuffed).startswith("hackable: the stuffed-reply probe")
  empty = SHOP.replace('done = action.strip() == str(self.price * self.count)',
                       'done = not action.strip()')
  assert reason(empty).startswith("hackable: the empty-replies probe")
  example = SHOP.replace('Answer with the number of cents.",',
                         'Answer with the number of cents, for example 250.",')
  example = example.replace('done = action.strip() == str(self.price * self.count)',
                            'done = action.strip() in (str(self.price * self.count), "250")')
  assert reason(example).startswith('hackable: the example-action probe (action "250")')


def test_nondeterminism_after_the_first_step_is_caught_on_whole_episodes():
  later = SHOP.replace('return "No.", 0.0,', 'return f"No ({random.random()}).", 0.0,')
  assert reason(later).startswith(f"deterministic: seed {DRAW.seeds[0]} replayed with the actions")
  assert "step" in reason(later)


def test_the_oracle_must_solve_fresh_seeds_and_can_be_required():
  wrong = SHOP.replace("str(2 * self.price)]", "str(2 * self.price + 1)]")
  assert reason(wrong).startswith(
      "oracle: oracle_actions() reached a return of 0.5 < 0.99 on seed")
  oracle_line = ('    return [{"name": "get_price", "arguments": {"item": self.item}}, '
                 'str(self.price),\n            str(2 * self.price)]')
  raises = SHOP.replace(oracle_line, "    1 / 0\n" + oracle_line)
  assert reason(raises).startswith(f"oracle: oracle_actions() after reset(seed="
                                   f"{DRAW.probe_seeds[0]}) failed: ZeroDivisionError")
  string = SHOP.replace(oracle_line, "    return str(self.price)")
  assert reason(string) == "oracle: oracle_actions() must return a list, got str"
  unjson = SHOP.replace(oracle_line, "    return [{1, 2}]")
  assert reason(unjson).startswith("oracle: oracle_actions() returned {1, 2}, which is neither")
  number = SHOP.replace(oracle_line, "    return [42]")
  assert reason(number).startswith("oracle: oracle_actions() returned 42, which is neither")
  missing = SHOP.replace("def oracle_actions", "def _oracle_actions")
  assert reason(missing) is None
  assert reason(missing, require_oracle=True).startswith("oracle: this run requires")
  assert reason(contract.EXAMPLE_ENV, require_oracle=True) is None


def test_a_tool_environment_must_pose_a_sequence_of_user_instructions():
  seed = DRAW.probe_seeds[0]
  item = random.Random(seed).choice(["apple", "pear", "plum", "fig"])  # as ONE_REQUEST draws
  assert reason(ONE_REQUEST, require_tools=True, require_oracle=True) == (
      f"instructions: the oracle_actions() episode of seed {seed} posed 1 user instruction(s) "
      f"('How much is one {item}? Answer with the number of cents.') before its last step; a "
      "tool-use environment poses a sequence of at least 2, each on an observation line "
      "starting with 'User:', the next once the previous one is done")
  unmarked = SHOP.replace("Right.\\nUser: And how much", "Right. And how much")
  assert reason(unmarked).startswith(f"instructions: the oracle_actions() episode of seed {seed} "
                                     "posed 1 user instruction(s) ('How much is one")
  # Judged on the oracle's episodes: without oracle_actions() there are none to judge.
  assert reason(ONE_REQUEST.replace("def oracle_actions", "def _oracle_actions")) is None
  assert reason(contract.EXAMPLE_ENV, require_oracle=True) is None  # not a tool environment


def test_real_pool_judges_as_the_fake_pool(pool):
  sources = [SHOP, SHOP.replace("    if isinstance(action, dict):",
                                "    action = str(action)\n    if isinstance(action, dict):")]
  fake = FakePool(max_turns=8, validation_seed=VALIDATION_SEED)
  assert pool.validate(sources) == fake.validate(sources)


@pytest.mark.parametrize("spec", [
    {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"},
                                      "x": {"type": ["number", "null"]},
                                      "e": {"enum": ["p", "q"]},
                                      "l": {"type": "array", "items": {"type": "boolean"}},
                                      "o": {"type": "object", "properties": {
                                          "k": {"type": "string"}}, "required": ["k"]}},
     "required": ["a", "n"]},
    {"type": "object", "properties": {}},
])
def test_sampled_arguments_match_their_schema(spec):
  schema.check_schema(spec)
  assert schema.validate(sample_value(spec), spec) is None


def test_schema_validate_names_the_broken_part():
  spec = {"type": "object", "properties": {"n": {"type": "integer"},
                                           "l": {"type": "array", "items": {"enum": [1, 2]}}},
          "required": ["n"]}
  assert schema.validate({}, spec) == "arguments lacks the required 'n'"
  assert schema.validate({"n": True}, spec) == "arguments.n must be integer, got bool"
  assert schema.validate({"n": 2, "l": [1, 3]}, spec) == "arguments.l[1] must be one of [1, 2]"
  assert schema.validate({"n": 2.0}, spec) is None
  with pytest.raises(schema.BadSchema, match="required names"):
    schema.check_schema({"type": "object", "properties": {}, "required": ["q"]})


def test_probe_actions():
  assert example_action('Move with "go north" or "go south".') == "go north"
  assert example_action("Answer with one integer, for example 7.") == "7"
  assert example_action("No example here.") is None
  stuffed = stuffed_reply("Pick a door: red, blue.")
  assert stuffed.startswith("0 1 2 3") and " 999 " in stuffed and " red " in stuffed
  assert len(stuffed_reply(" ".join(f"w{i}" for i in range(2000)))) == contract.MAX_ACTION_CHARS
  assert alternatives("Call it: heads or tails?") == ("heads", "tails")
  assert alternatives("No options here.") == ("yes", "no")
