"""Minigames: short environments of the six game categories, generated from templates.

A seed game is about a thousand tokens; a model small enough to train on a CPU cannot write one
token-perfect. A minigame is one of seven templates (one a category, two for probing) of 25-40
lines with knobs: class name, ranges, counts, turn slack, reward shaping and wording. Every
choice is drawn from `random.Random(f"{seed}/{family}/{index}")`, so `minigame(family, index)`
is deterministic. They are the starter policy's design targets and its loop's first memory
(`selfplay.library = "minigames"`), where a designer that edits the one in its prompt writes a
new, valid one. Each obeys the environment contract and has `oracle_actions()`; the starter's
env set keeps only those the validator passes with every guard. The peek family's hint either
carries its strategy (probe, then answer the word shown) or only restates the rule, so a
design's regret depends on its hint.

Plain Python: this module never imports jax or the model.
"""

from __future__ import annotations

import dataclasses
import random
import re
import string

__all__ = ["FAMILIES", "Minigame", "hint_carries_strategy", "library", "minigame", "peek_probe",
           "peek_words", "stream", "untold_plan"]


@dataclasses.dataclass(frozen=True)
class Minigame:
  uid: str  # "mg<seed>/<family>/<index>"
  family: str
  category: str
  source: str
  hint: str


_QUIZ = string.Template('''\
import random


class $name:
  """$doc"""

  max_turns = $turns

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.pairs = [(rng.randint($lo, $hi), rng.randint($lo, $hi)) for _ in range($n)]
    self.index = 0
    return self._ask(), {}

  def _ask(self):
    a, b = self.pairs[self.index]
    return f"$ask {self.index + 1} of $n: what is {a} $op {b}? Reply with one integer."

  def step(self, action):
    if self.index >= $n:
      return "The quiz is over.", 0.0, True, False, {}
    try:
      value = int(str(action).strip())
    except ValueError:
      return "Reply with one integer only.", 0.0, False, False, {}
    a, b = self.pairs[self.index]
    reward = 1 / $n if value == a $op b else 0.0
    self.index += 1
    if self.index == $n:
      return f"$done {a $op b}.", reward, True, False, {}
    return f"$done {a $op b}. " + self._ask(), reward, False, False, {}

  def oracle_actions(self):
    return [str(a $op b) for a, b in self.pairs]
''')

_GUESS = string.Template('''\
import random


class $name:
  """$doc"""

  max_turns = $turns

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.target = rng.randint(1, $hi)
    self.tries = 0
    return "I picked a number from 1 to $hi. Reply with one integer.", {}

  def step(self, action):
    try:
      guess = int(str(action).strip())
    except ValueError:
      return "Reply with one integer only.", 0.0, False, False, {}
    self.tries += 1
    if guess == self.target:
      return "$right", max($floor, 1.0 - $cost * (self.tries - 1)), True, False, {}
    side = "$up" if guess < self.target else "$down"
    return f"{guess} is wrong; $go {side}.", 0.0, False, False, {}

  def oracle_actions(self):
    return [str(self.target)]
''')

_SEQUENCE = string.Template('''\
import random


class $name:
  """$doc"""

  max_turns = $turns

  def reset(self, seed=None):
    rng = random.Random(seed)
    start, step = rng.randint($lo, $hi), rng.randint($slo, $shi)
    self.terms = [start]
    for _ in range($shown):
      self.terms.append(self.terms[-1] $op step)
    self.answer = self.terms.pop()
    self.misses = 0
    shown = ", ".join(map(str, self.terms))
    return f"$ask {shown}, ... Reply with the next term.", {}

  def step(self, action):
    try:
      value = int(str(action).strip())
    except ValueError:
      return "Reply with one integer only.", 0.0, False, False, {}
    if value == self.answer:
      return "$right", max(0.0, 1.0 - $cost * self.misses), True, False, {}
    self.misses += 1
    return "$wrong", 0.0, False, False, {}

  def oracle_actions(self):
    return [str(self.answer)]
''')

_REACH = string.Template('''\
import random


class $name:
  """$doc"""

  max_turns = $turns

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.value = rng.randint($lo, $hi)
    self.plan = [rng.choice(["add", "$big"]) for _ in range($moves)]
    self.target = self.value
    for move in self.plan:
      self.target = self._apply(self.target, move)
    return f"$start {self.value}. Target: {self.target}. Moves: add (+$add) or $big (x$mul).", {}

  def _apply(self, value, move):
    return value + $add if move == "add" else value * $mul

  def step(self, action):
    move = str(action).strip().lower()
    if move not in ("add", "$big"):
      return "Reply with add or $big.", 0.0, False, False, {}
    self.value = self._apply(self.value, move)
    if self.value == self.target:
      return f"$right {self.value}.", 1.0, True, False, {}
    if self.value > self.target:
      return f"{self.value} is past the target.", 0.0, True, False, {}
    return f"Now {self.value}. Target: {self.target}.", 0.0, False, False, {}

  def oracle_actions(self):
    return list(self.plan)
''')

_LOCATE = string.Template('''\
import random
import re


class $name:
  """$doc"""

  max_turns = $turns

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.size = rng.randint($least, $size)
    self.secret = rng.randint(1, self.size)
    return f"$intro 1 to {self.size}. Reply check A B to ask if it is in A..B, or open N.", {}

  def step(self, action):
    text = str(action).strip().lower()
    found = re.fullmatch(r"check (\\d+) (\\d+)", text)
    if found:
      low, high = int(found.group(1)), int(found.group(2))
      where = "is" if low <= self.secret <= high else "is not"
      return f"$what {where} in {low}..{high}.", 0.0, False, False, {}
    found = re.fullmatch(r"open (\\d+)", text)
    if not found:
      return "Reply check A B or open N.", 0.0, False, False, {}
    if int(found.group(1)) == self.secret:
      return "$right", 1.0, True, False, {}
    return "$wrong", 0.0, True, False, {}

  def oracle_actions(self):
    return [f"open {self.secret}"]
''')

_WALK = string.Template('''\
import random


class $name:
  """$doc"""

  max_turns = $turns
  MOVES = {"up": (0, 1), "down": (0, -1), "left": (-1, 0), "right": (1, 0)}

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.pos = [rng.randint(0, $size), rng.randint(0, $size)]
    self.goal = list(self.pos)
    while self.goal == self.pos:
      self.goal = [rng.randint(0, $size), rng.randint(0, $size)]
    return f"$intro {self._distance()} $steps. Moves: up, down, left, right.", {}

  def _distance(self):
    return abs(self.pos[0] - self.goal[0]) + abs(self.pos[1] - self.goal[1])

  def step(self, action):
    move = self.MOVES.get(str(action).strip().lower())
    if move is None:
      return "Reply up, down, left or right.", 0.0, False, False, {}
    self.pos = [self.pos[0] + move[0], self.pos[1] + move[1]]
    if self.pos == self.goal:
      return "$right", 1.0, True, False, {}
    return f"$now {self._distance()} $steps.", 0.0, False, False, {}

  def oracle_actions(self):
    dx, dy = self.goal[0] - self.pos[0], self.goal[1] - self.pos[1]
    return (["right"] * dx + ["left"] * -dx) + (["up"] * dy + ["down"] * -dy)
''')


_PEEK = string.Template('''\
import random


class $name:
  """$doc"""

  max_turns = $turns
  WORDS = $words

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.word = rng.choice(self.WORDS)
    order = list(self.WORDS)
    rng.shuffle(order)  # the listing varies with the seed; the word shows only to the probe
    listed = ", ".join(order)
    return f"$intro Reply $probe, or answer W with W one of: {listed}.", {}

  def step(self, action):
    text = str(action).strip().lower()
    if text == "$probe":
      return f"$reveal {self.word}", 0.0, False, False, {}
    if text.startswith("answer "):
      if text[len("answer "):].strip() == self.word:
        return "$right", 1.0, True, False, {}
      return "$wrong", 0.0, True, False, {}
    return "Reply $probe or answer W.", 0.0, False, False, {}

  def oracle_actions(self):
    return ["$probe", f"answer {self.word}"]
''')


def _quiz(rng: random.Random) -> tuple[dict, str]:
  op = rng.choice(["+", "-", "*"])
  lo = rng.choice([1, 2, 3, 5, 10])
  hi = lo + rng.choice([8, 10, 15, 20, 40, 90]) if op != "*" else lo + rng.choice([5, 8, 10, 12])
  n = rng.choice([2, 3, 4, 5])
  knobs = dict(name=rng.choice(("MathQuiz", "SumDrill", "QuickMath", "MentalSums",
                                      "ArithmeticRound", "NumberQuiz", "CalcSprint")),
               doc=rng.choice(["Answer a short round of arithmetic questions.",
                               "A quiz of small calculations, one question a turn.",
                               "Mental arithmetic: each right answer scores a share."]),
               op=op, lo=lo, hi=hi, n=n, turns=n + rng.choice([0, 1, 2]),
               ask=rng.choice(["Question", "Problem", "Item"]),
               done=rng.choice(["The answer was", "Correct value:", "It is"]))
  hint = (f"Each question is a {'sum' if op == '+' else 'difference' if op == '-' else 'product'}"
          f" of two numbers: compute it exactly and reply with the integer alone, every turn.")
  return knobs, hint


def _guess(rng: random.Random) -> tuple[dict, str]:
  hi = rng.choice([16, 20, 30, 32, 50, 64, 100])
  need = max(1, (hi - 1).bit_length())
  knobs = dict(name=rng.choice(("GuessNumber", "HiddenNumber", "HigherLower",
                                      "NumberHunt", "SecretNumber", "PickANumber")),
               doc=rng.choice(["Guess a hidden number; each miss says higher or lower.",
                               "Find the secret number from higher/lower feedback."]),
               hi=hi, turns=need + rng.choice([0, 1, 2]),
               floor=rng.choice(["0.2", "0.25", "0.3", "0.5"]),
               cost=rng.choice(["0.1", "0.15", "0.2"]),
               right=rng.choice(["Correct!", "You found it!", "That is the number."]),
               up=rng.choice(["higher", "up"]), down=rng.choice(["lower", "down"]),
               go=rng.choice(["go", "try", "aim"]))
  hint = (f"Binary search: start at the middle of 1..{hi} and halve the remaining range with "
          "each higher/lower answer; fewer tries score more.")
  return knobs, hint


def _sequence(rng: random.Random) -> tuple[dict, str]:
  op = rng.choice(["+", "+", "-", "*"])
  slo, shi = (2, rng.choice([3, 4])) if op == "*" else (1, rng.choice([5, 9, 12, 20]))
  lo = rng.choice([1, 2, 5]) if op == "*" else rng.choice([0, 1, 10, 50])
  hi = lo + (rng.choice([3, 5]) if op == "*" else rng.choice([20, 40, 100]))
  knobs = dict(name=rng.choice(("NextTerm", "SequenceGuess", "PatternNext",
                                      "ContinueSeries", "NumberSeries")),
               doc=rng.choice(["Name the next term of a number sequence.",
                               "Continue the series: one number answers it."]),
               op=op, lo=lo, hi=hi, slo=slo, shi=shi, shown=rng.choice([3, 4, 5]),
               turns=rng.choice([2, 3, 4]), cost=rng.choice(["0.3", "0.4", "0.5"]),
               ask=rng.choice(["Sequence:", "The series goes", "Terms:"]),
               right=rng.choice(["Right!", "Correct, that is next.", "Yes."]),
               wrong=rng.choice(["No, try again.", "Not the next term.", "Wrong."]))
  rule = {"+": "adds", "-": "subtracts", "*": "multiplies by"}[op]
  hint = (f"Every term {rule} the same number: find it from two neighbouring terms and apply "
          "it to the last term shown.")
  return knobs, hint


def _reach(rng: random.Random) -> tuple[dict, str]:
  add, mul = rng.choice([1, 2, 3, 5]), rng.choice([2, 3])
  moves = rng.choice([3, 4, 5])
  big = {2: rng.choice(["double", "twice"]), 3: rng.choice(["triple", "thrice"])}[mul]
  knobs = dict(name=rng.choice(("ReachTarget", "HitTheNumber", "GrowTo", "ClimbNumber",
                                      "TargetMaker")),
               doc=rng.choice(["Reach the target value with add and multiply moves.",
                               "Grow a number to the target exactly; overshooting loses."]),
               lo=rng.choice([1, 2, 3]), hi=rng.choice([5, 9, 12]), add=add, mul=mul, big=big,
               moves=moves, turns=moves + rng.choice([0, 1, 2]),
               start=rng.choice(["Start:", "You hold", "Value:"]),
               right=rng.choice(["Target reached:", "Exactly:", "Done at"]))
  hint = (f"Work backwards from the target: if it divides by {mul} and the quotient is still "
          f"at least the start, the last move was {big}, otherwise add; then play the moves "
          "forwards.")
  return knobs, hint


def _locate(rng: random.Random) -> tuple[dict, str]:
  size = rng.choice([8, 10, 16, 20, 32, 40])
  knobs = dict(name=rng.choice(("FindTheBox", "LocatePrize", "HiddenSlot", "TreasureBox",
                                      "LockerSearch")),
               doc=rng.choice(["Locate the prize with range checks, then open its box.",
                               "Ask whether the item lies in a range; one open ends it."]),
               size=size, least=size // 2, turns=(size - 1).bit_length() + rng.choice([1, 2, 3]),
               intro=rng.choice(["A prize is in one box numbered", "One locker holds the key, from",
                                 "The coin is under a cup numbered"]),
               what=rng.choice(["The prize", "It", "The item"]),
               right=rng.choice(["Found it!", "That box holds it.", "Correct box!"]),
               wrong=rng.choice(["Empty. Game over.", "Wrong box.", "Nothing there."]))
  hint = ("Check halves: ask check 1 M with M half the boxes, keep the half that answers yes, "
          "and repeat until one box is left; open only then, since a wrong open ends the game.")
  return knobs, hint


def _walk(rng: random.Random) -> tuple[dict, str]:
  size = rng.choice([3, 4, 5, 6])
  knobs = dict(name=rng.choice(("HotCold", "GridSeeker", "FindTheGoal", "WarmerColder",
                                      "DistanceWalk")),
               doc=rng.choice(["Walk a grid to a hidden goal; you only hear the distance.",
                               "Reach the goal on a small grid by distance feedback."]),
               size=size, turns=2 * size + rng.choice([2, 4, 6]),
               intro=rng.choice(["The goal is", "You stand"]),
               steps=rng.choice(["steps away", "moves from the goal"]),
               now=rng.choice(["Now", "Distance:"]),
               right=rng.choice(["Goal reached!", "You found the goal.", "Arrived!"]))
  hint = ("Try one direction: if the distance drops, keep going until it rises, then step back "
          "and do the same on the other axis.")
  return knobs, hint


# The peek family's words (single common words, so a small tokenizer keeps each whole).
PEEK_WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "honey",
              "ocean")


def _peek(rng: random.Random) -> tuple[dict, str]:
  """A hidden word that one probe action shows as the observation's last word. Knobs: whether
  the opening says what the probe does (`explain`), and whether the hint carries the
  strategy (probe, then answer the word it shows) or only restates the rule."""
  probe = rng.choice(["peek", "look", "scan", "lift"])
  words = rng.sample(PEEK_WORDS, rng.choice([4, 5, 6]))
  secret = rng.choice(["A secret word is hidden.", "One word is sealed in a box."])
  explain = rng.random() < 0.5
  intro = f"{secret} {probe.capitalize()} shows it." if explain else secret
  knobs = dict(name=rng.choice(("PeekWord", "HiddenWord", "SealedWord", "WordBox", "SecretTag")),
               doc=rng.choice(["Name the hidden word; one action shows it.",
                               "Answer with the sealed word."]),
               turns=rng.choice([2, 3, 4]), words=repr(tuple(words)), intro=intro, probe=probe,
               reveal=rng.choice(["You see:", "Inside:", "It reads:"]),
               right=rng.choice(["Correct!", "That is the word.", "Right word!"]),
               wrong=rng.choice(["Wrong word.", "No, game over.", "That is not it."]))
  if rng.random() < 0.5:
    hint = (f"Reply {probe} first: the last word it shows is the secret; then reply answer "
            "with that word.")
  else:
    hint = "The secret is one of the listed words; answer with the one you think it is."
  return knobs, hint


UNTOLD_PROBE_SHARE = 0.3  # how often an agent that was not told the peek strategy probes


def untold_plan(family: str, source: str, hint: str, arm: str,
                rng: random.Random) -> list[str] | None:
  """The actions of an agent that was not told the strategy, or None for the oracle's.

  Only a peek game has a strategy that its hint may carry (name the probe action). Its
  no-hint arm, and its hint arm when the hint does not carry the strategy, probe only
  UNTOLD_PROBE_SHARE of the time (the oracle) and otherwise answer a listed word at random.
  Every other family's hint restates a rule the oracle plays in both arms.
  """
  if family != "peek":
    return None
  if (arm == "hint" and hint_carries_strategy(family, source, hint)
      or rng.random() < UNTOLD_PROBE_SHARE):
    return None
  return [f"answer {rng.choice(peek_words(source))}"]


def hint_carries_strategy(family: str, source: str, hint: str) -> bool:
  """Whether a game's hint tells a strategy the no-hint arm lacks: a peek game's hint that
  names its probe action (every other family's hint restates a rule)."""
  return family == "peek" and peek_probe(source) in hint


def peek_probe(source: str) -> str:
  """A peek game's probe action, read from its source (the template's `if text == ...`)."""
  return re.search(r'if text == "(\w+)":', source).group(1)


def peek_words(source: str) -> list[str]:
  """A peek game's listed words, read from its source (the template's WORDS)."""
  return re.findall(r"'(\w+)'", re.search(r"WORDS = \((.*)\)", source).group(1))


# family -> (category, template, knob drawer)
FAMILIES = {
    "quiz": ("arithmetic", _QUIZ, _quiz),
    "guess": ("deduction", _GUESS, _guess),
    "sequence": ("induction", _SEQUENCE, _sequence),
    "reach": ("planning", _REACH, _reach),
    "locate": ("probing", _LOCATE, _locate),
    "walk": ("spatial", _WALK, _walk),
    "peek": ("probing", _PEEK, _peek),
}


def minigame(family: str, index: int, seed: int = 0) -> Minigame:
  """Candidate `index` of a family (deterministic in family, index and seed)."""
  if family not in FAMILIES:
    raise ValueError(f"minigame family {family!r}: expected one of {sorted(FAMILIES)}")
  category, template, draw = FAMILIES[family]
  knobs, hint = draw(random.Random(f"{seed}/{family}/{index}"))
  return Minigame(f"mg{seed}/{family}/{index}", family, category, template.substitute(knobs), hint)


def stream(seed: int = 0, start: int = 0):
  """index start of every family, then start + 1, ... (distinctness is the caller's job)."""
  index = start
  while True:
    for family in FAMILIES:
      yield minigame(family, index, seed)
    index += 1


def library(categories=None, per_family: int = 2, min_size: int = 0) -> list[Minigame]:
  """The loop's first memory for `selfplay.library = "minigames"`: indices 0.. of each family
  of the categories, `per_family` of each or more, so that there are at least `min_size`.

  Seed 1, so the starter's fine-tuning set (seed 0) does not contain them.
  """
  families = [f for f, (cat, _, _) in FAMILIES.items() if categories is None or cat in categories]
  per_family = max(per_family, -(-min_size // max(len(families), 1)))
  return [minigame(f, i, seed=1) for f in families for i in range(per_family)]
