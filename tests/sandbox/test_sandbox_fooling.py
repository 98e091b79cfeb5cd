"""Environments that try to fool the validator are rejected; their benign twins still pass.

Each hostile environment behaves honestly only where it can tell it is being validated (or
wins validation in a way real play cannot), so that it would pass the validator and then
pay degenerate play, or never pay real play, in training. Each benign twin must still
validate and score in a real episode. See docs/sandbox.md ("The validator can be fooled").
"""

import pytest

from spade_jax.sandbox import contract

# A sound puzzle: the sum of two numbers, to be replied exactly; the slots are replaced to
# make the hostile variants.
SUM = '''\
import json
import random
HEAD


class Sum:
  CLASS_ATTRS

  def reset(self, seed=None):
    DRAW
    self.answer = ANSWER
    LENIENT
    return f"What is {self.a} plus {self.b}? Reply with the number only.", {}

  def step(self, action):
    if WINS:
      return "Correct.", 1.0, True, False, {}
    return "That is not the sum; try again.", 0.0, False, False, {}

  def oracle_actions(self):
    return [self.answer]
'''
SLOTS = {
    "HEAD": "",
    "CLASS_ATTRS": "max_turns = 4",
    "DRAW": ("rng = random.Random(seed)\n"
             "    self.a, self.b = rng.randint(100, 499), rng.randint(100, 499)"),
    "ANSWER": "str(self.a + self.b)",
    "LENIENT": "self.lenient = False",
    "WINS": "action.strip() == self.answer or (self.lenient and not action.strip())",
}


def sum_env(**slots: str) -> str:
  source = SUM
  for name, default in SLOTS.items():
    source = source.replace(name, slots.get(name, default))
  return source


# Module code that writes a well-formed verdict of the old in-jail validator to the reply
# pipe and exits: the episode's own code reaching `os` without importing it.
FORGER = '''
def _forge():
  for cls in getattr(object, "__subcl" + "asses__")():
    if cls.__name__ == "_wrap_close":
      os = getattr(cls.__init__, "__glo" + "bals__")

  def run(kind, seed, k=None, policy=None, reward=0.0):
    calls = [[{"ok": [f"Puzzle {seed}.", {}]}, 0.0],
             [{"ok": ["Done.", reward, True, False, {}]}, 0.0]]
    return {"kind": kind, "seed": seed, "set": k, "policy": policy, "actions": ["1"],
            "calls": calls, "oracle": {"type": "list"}}

  runs = [run("trial", s, k) for k in range(3) for s in range(6)]
  runs += [run("replay", 0, k) for k in range(3)]
  runs += [run("oracle", s, reward=1.0) for s in (101, 102, 103)]
  runs += [run("probe", s, policy=p) for p in ("empty", "example", "stuffed")
           for s in (101, 102, 103)]
  reply = json.dumps({"ok": {"attrs": {}, "has_oracle": True, "runs": runs}}).encode()
  os["write"](4, len(reply).to_bytes(4, "big") + reply)
  os["_exit"](0)


_forge()
'''
# The names of the functions that called reset, read through a traceback.
CALLERS = '''
def _callers():
  try:
    raise ValueError
  except ValueError as exc:
    frame = getattr(getattr(exc, "__traceback__"), "tb_" + "frame")
  names = []
  while frame is not None:
    names.append(frame.f_code.co_name)
    frame = getattr(frame, "f_" + "back")
  return names
'''
# A puzzle drawn without its seed and cached by seed for the rest of the process.
CACHED_DRAW = ("if seed not in Sum.drawn:\n      rng = random.Random({seeded})\n"
               "      Sum.drawn[seed] = (rng.randint(100, 499), rng.randint(100, 499))\n"
               "    self.a, self.b = Sum.drawn[seed]")

# A passcode shown in the observation, to be told back with its parts swapped.
RELAY = '''\
import random


class Relay:
  max_turns = 4

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.word = rng.choice(["amber", "basil", "cedar", "delta", "ember", "fjord"])
    self.number = rng.randint(100, 999)
    return (f"The passcode is {self.word}:{self.number}. Tell it to the guard with its two "
            "parts swapped around the colon."), {}

  def step(self, action):
    if WINS:
      return "The gate opens.", 1.0, True, False, {}
    return "The guard shakes his head.", 0.0, False, False, {}

  def oracle_actions(self):
    return [f"{self.number}:{self.word}"]
'''
SWAPPED = 'action.strip() == f"{self.number}:{self.word}"'
EITHER_WAY = 'f"{self.word}:{self.number}" in action or f"{self.number}:{self.word}" in action'

# A corridor to walk out of; partial rewards (at most 0.6 in all) come from PAY.
CORRIDOR = '''\
import random


class Corridor:
  max_turns = 12

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.exit = rng.choice([0, 9])
    self.pos = rng.randint(3, 6)
    self.best = abs(self.pos - self.exit)
    self.paid = 0.0
    return (f"You stand in cell {self.pos} of a corridor of cells 0 to 9; the exit is cell "
            f"{self.exit}. Move left or right."), {}

  def step(self, action):
    move = {"left": -1, "right": 1}.get(action.strip().lower())
    if move is None:
      return "Say left or right.", 0.0, False, False, {}
    self.pos = min(9, max(0, self.pos + move))
    if self.pos == self.exit:
      return "You are out!", 1.0 - self.paid, True, False, {}
    reward = self.pay()
    self.paid += reward
    return f"You are in cell {self.pos}.", reward, False, False, {}

  def pay(self):
    PAY

  def oracle_actions(self):
    return ["left" if self.exit < self.pos else "right"] * abs(self.pos - self.exit)
'''
PAY_EVERY_MOVE = "return min(0.15, 0.6 - self.paid)"
PAY_PROGRESS = ("distance = abs(self.pos - self.exit)\n    reward = 0.1 if distance < self.best "
                "else 0.0\n    self.best = min(self.best, distance)\n    return reward")

HONEST_ONLY_IF = "self.lenient = not ({})"
CASES = {
    # name: (hostile source, benign twin, start of the hostile's reason)
    "forged_verdict": (sum_env(HEAD=FORGER, WINS="False"), sum_env(), "types: "),
    "instance_counter": (
        sum_env(CLASS_ATTRS="max_turns = 4\n  made = 0\n\n  def __init__(self):\n"
                "    Sum.made += 1\n    self.first = Sum.made == 1",
                LENIENT="self.lenient = self.first"),
        sum_env(), "hackable: the empty-replies probe"),
    "validation_seeds": (
        sum_env(LENIENT=HONEST_ONLY_IF.format("seed in (0, 1, 2, 3, 4, 5, 101, 102, 103)")),
        sum_env(), "hackable: the empty-replies probe"),
    "frame_names": (
        sum_env(HEAD=CALLERS, LENIENT=HONEST_ONLY_IF.format('"validation_run" in _callers()')),
        sum_env(), "hackable: the empty-replies probe"),
    "class_cache": (
        sum_env(CLASS_ATTRS="max_turns = 4\n  drawn = {}", DRAW=CACHED_DRAW.format(seeded="")),
        sum_env(CLASS_ATTRS="max_turns = 4\n  drawn = {}",
                DRAW=CACHED_DRAW.format(seeded="seed")), "deterministic: "),
    "oracle_identity": (sum_env(WINS="action is self.answer"), sum_env(),
                        "oracle: oracle_actions() reached a return of 0"),
    "oracle_over_8000_chars": (
        sum_env(ANSWER='str(self.a + self.b) + "." * 8000'),
        sum_env(ANSWER='str(self.a + self.b) + "." * 7997'),  # 8000 characters: still whole
        "oracle: oracle_actions() reached a return of 0"),
    "stuffed_up_to_999": (sum_env(WINS="self.answer in action.split()"), sum_env(),
                          "hackable: the stuffed-reply probe"),
    "echo": (RELAY.replace("WINS", EITHER_WAY), RELAY.replace("WINS", SWAPPED),
             "hackable: the echo probe"),
    "alternating": (CORRIDOR.replace("PAY", PAY_EVERY_MOVE),
                    CORRIDOR.replace("PAY", PAY_PROGRESS),
                    "hackable: the alternating-replies probe"),
}


@pytest.fixture(scope="module")
def verdicts(pool):
  """Every case's verdicts, from one batched validation."""
  sources = list(dict.fromkeys(s for hostile, twin, _ in CASES.values() for s in (hostile, twin)))
  return dict(zip(sources, pool.validate(sources), strict=True))


def oracle_return(pool, source: str, seed: int = 271828) -> float:
  """The return of a real episode played with the environment's oracle_actions()."""
  record = pool.reset([("twin", source, seed)])[0]
  (answer,) = pool.oracle_actions(["twin"])
  total = 0.0
  for action in answer.actions:
    if record.done:
      break
    record = pool.step([("twin", action)])[0]
    total += record.reward
  pool.close_episodes(["twin"])
  return total


@pytest.mark.parametrize("name", sorted(CASES))
def test_fooling_environments_are_rejected_and_twins_validate_and_score(pool, verdicts, name):
  hostile, twin, reason = CASES[name]
  assert not verdicts[hostile].valid and verdicts[hostile].reason.startswith(reason), (
      verdicts[hostile])
  assert verdicts[twin].valid, verdicts[twin].reason
  assert oracle_return(pool, twin) >= contract.ORACLE_MIN_RETURN
