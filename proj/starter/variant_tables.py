"""Per-seed parameter tables of the starter's environment variants (see variants.py).

Each train-split seed game has knobs; a knob is a tuple of alternatives to the seed's own
text (which is always alternative 0 and not listed). An alternative is a set of exact
text edits of the source, each of which must match the seed exactly once, plus the edits
its hint needs where the change touches what the hint says. Knobs change constants, ranges,
sizes, names, reward tiers and small rules; the validator decides which combinations hold.

Plain Python: this module never imports jax or the model.
"""

from __future__ import annotations

import dataclasses
import re

Edit = tuple[str, str]  # (text that occurs exactly once, its replacement)


@dataclasses.dataclass(frozen=True)
class Alt:
  """One alternative of a knob: edits of the source and of the hint."""

  source: tuple[Edit, ...]
  hint: tuple[Edit, ...] = ()


def knob(old: str, *news: str) -> tuple[Alt, ...]:
  """A knob that replaces `old` by each of `news` in turn."""
  return tuple(Alt(((old, new),)) for new in news)


# Other names for each game's class (the seed's own name is alternative 0).
CLASS_NAMES = {
    "mastermind": ("CodeBreaker", "HiddenCode", "DigitCode"),
    "minisudoku": ("SudokuFour", "TinySudoku", "LatinBoxes"),
    "clue": ("Whodunit", "EnvelopeMystery", "CardDetective"),
    "bridge": ("NightCrossing", "TorchBridge", "RiverCrossing"),
    "jugs": ("JugMeasure", "TwoJugs", "DecantPuzzle"),
    "pancakes": ("SpatulaSort", "StackFlipper", "FlipSort"),
    "hotcold": ("TreasureHunt", "DistanceProbe", "BuriedChest"),
    "robot": ("TurnedCompass", "SkewedRover", "CompassRobot"),
    "dice": ("DieRoller", "TumblingCube", "CubeWalk"),
    "countdown": ("NumberTarget", "ReachTheTarget", "ArithmeticTarget"),
    "prices": ("ShopPrices", "BasketTotals", "HiddenPrices"),
    "magic": ("MagicGrid", "SumSquare", "LoShu"),
    "sequence": ("LinearRecurrence", "SequenceOracle", "TermPredictor"),
    "blackbox": ("HiddenPolynomial", "PolyMachine", "FunctionProbe"),
    "triples": ("RuleFinder", "TripleTest", "HiddenRule"),
    "coins": ("FakeCoin", "BalanceScale", "OddCoin"),
    "switches": ("BulbWiring", "SwitchMapper", "LampBoard"),
    "sorting": ("BoxOrder", "WeightRanking", "ScaleSort"),
}

_REWARD_TIERS = "tier = 1.0 if self.moves <= 3 else 0.7 if self.moves <= 5 else 0.4"

KNOBS: dict[str, tuple[tuple[Alt, ...], ...]] = {
    "mastermind": (
        knob("rng.choice([5, 6])", "rng.choice([4, 5])", "rng.choice([5, 6, 7])",
             "rng.choice([6, 7])"),
        knob("reward = 0.1 * max(0, exact - self.best)",
             "reward = 0.05 * max(0, exact - self.best)",
             "reward = 0.15 * max(0, exact - self.best)"),
    ),
    "minisudoku": (
        knob("BLANKS = 6", "BLANKS = 5", "BLANKS = 4"),
        knob("Each correct \"\n           f\"cell scores", "Every correct \"\n           f\"cell "
             "earns a share"),
    ),
    "clue": (
        knob('["Plum", "Scarlet", "Mustard", "Peacock", "Green", "White"]',
             '["Rose", "Gray", "Brown", "Black", "Orange", "Violet"]',
             '["Amber", "Jade", "Ruby", "Onyx", "Pearl", "Topaz"]'),
        knob('["kitchen", "library", "study", "hall", "lounge", "cellar"]',
             '["attic", "garden", "pantry", "gallery", "chapel", "cellar"]',
             '["kitchen", "ballroom", "conservatory", "hall", "lounge", "studio"]'),
        knob("0.15 * right", "0.1 * right", "0.2 * right"),
    ),
    "bridge": (
        knob("range(1, 16 + 15 * self.difficulty)", "range(1, 13 + 12 * self.difficulty)",
             "range(1, 21 + 15 * self.difficulty)", "range(2, 18 + 15 * self.difficulty)"),
        knob('["Ann", "Bob", "Cat", "Dan", "Eve", "Fox", "Gil", "Ivy", "Jay", "Kim"]',
             '["Ada", "Ben", "Cy", "Dot", "Eli", "Fay", "Gus", "Hal", "Ida", "Joe"]',
             '["Liv", "Max", "Ned", "Oli", "Pia", "Ray", "Sam", "Tom", "Uma", "Val"]'),
        knob("0.5 if self.elapsed <= self.limit + 3", "0.5 if self.elapsed <= self.limit + 2",
             "0.4 if self.elapsed <= self.limit + 5"),
    ),
    "jugs": (
        knob('"A": rng.randint(3, 9 + more)', '"A": rng.randint(3, 11 + more)',
             '"A": rng.randint(4, 10 + more)'),
        knob('"B": rng.randint(4, 13 + more)', '"B": rng.randint(5, 15 + more)',
             '"B": rng.randint(4, 11 + more)'),
        knob("else 0.7 if extra <= 3 else 0.4", "else 0.6 if extra <= 3 else 0.3",
             "else 0.7 if extra <= 2 else 0.4"),
    ),
    "pancakes": (
        # (Six pancakes can need 9 flips, more than the games setting's 8 turns.)
        (Alt((("SIZE = 5", "SIZE = 4"), ("max_turns = 8", "max_turns = 6")),
             (("at most 7 flips", "at most 5 flips"),)),),
        knob("0.1 * max(0, settled - self.best)", "0.05 * max(0, settled - self.best)",
             "0.15 * max(0, settled - self.best)"),
    ),
    "hotcold": (
        knob("low, high = 8 + 6 * self.difficulty, 14 + 6 * self.difficulty",
             "low, high = 6 + 5 * self.difficulty, 12 + 5 * self.difficulty",
             "low, high = 10 + 8 * self.difficulty, 16 + 8 * self.difficulty",
             "low, high = 9 + 4 * self.difficulty, 20 + 4 * self.difficulty"),
        knob("0.6 if self.actions <= 5 else 0.3", "0.5 if self.actions <= 5 else 0.2",
             "0.6 if self.actions <= 4 else 0.3"),
    ),
    "robot": (
        knob("reach = 6 + self.difficulty", "reach = 5 + self.difficulty",
             "reach = 7 + self.difficulty"),
        knob(_REWARD_TIERS, _REWARD_TIERS.replace("0.7", "0.6").replace("0.4", "0.3"),
             _REWARD_TIERS.replace("<= 5", "<= 4")),
        knob("reward = 0.05 if", "reward = 0.04 if", "reward = 0.08 if"),
    ),
    "dice": (
        knob("tier = 1.0 if self.moves <= self.optimal + 2 else 0.7",
             "tier = 1.0 if self.moves <= self.optimal + 1 else 0.7",
             "tier = 1.0 if self.moves <= self.optimal + 2 else 0.6"),
        knob("Right cell, wrong face.\", 0.2", "Right cell, wrong face.\", 0.1",
             "Right cell, wrong face.\", 0.25"),
        knob("reach = 2 + 2 * self.difficulty", "reach = 3 + 2 * self.difficulty"),
    ),
    "countdown": (
        knob("hi, lo = 12 + 6 * self.difficulty, 25 * (1 + self.difficulty)",
             "hi, lo = 10 + 5 * self.difficulty, 20 * (1 + self.difficulty)",
             "hi, lo = 15 + 6 * self.difficulty, 30 * (1 + self.difficulty)",
             "hi, lo = 9 + 8 * self.difficulty, 40 * (1 + self.difficulty)"),
        knob("self.target > 30", "self.target > 40", "self.target > 20"),
        knob("reward = 0.5 if gap <= 2 else 0.25 if gap <= 10 else 0.0",
             "reward = 0.5 if gap <= 1 else 0.2 if gap <= 5 else 0.0",
             "reward = 0.4 if gap <= 3 else 0.2 if gap <= 12 else 0.0"),
    ),
    "prices": (
        (Alt((("rng.randint(1, 99)", "rng.randint(1, 49)"), ("from 1 to 99", "from 1 to 49"))),
         Alt((("rng.randint(1, 99)", "rng.randint(10, 99)"),
              ("from 1 to 99", "from 10 to 99")))),
        knob('["apple", "bread", "cheese", "dates", "eggs", "figs", "grapes", "honey", "jam"]',
             '["pens", "ink", "paper", "glue", "tape", "chalk", "clips", "folders", "pins"]',
             '["nails", "screws", "bolts", "hinges", "rope", "wire", "paint", "brushes", '
             '"tape"]'),
        knob("{0: 0.3, 1: 1.0, 2: 0.7, 3: 0.5}", "{0: 0.2, 1: 1.0, 2: 0.6, 3: 0.4}",
             "{0: 0.3, 1: 1.0, 2: 0.8, 3: 0.6}"),
    ),
    "magic": (
        knob("spread = 7 + 6 * self.difficulty", "spread = 5 + 4 * self.difficulty",
             "spread = 9 + 6 * self.difficulty"),
        knob("c = rng.randint(8, 30 + 30 * self.difficulty)",
             "c = rng.randint(10, 40 + 30 * self.difficulty)",
             "c = rng.randint(12, 25 + 20 * self.difficulty)"),
    ),
    "sequence": (
        knob("ROUNDS = 4", "ROUNDS = 3", "ROUNDS = 5"),
        knob("rng.randint(-6, 6)", "rng.randint(-9, 9)", "rng.randint(-4, 4)"),
        knob("terms = [rng.randint(-5, 9)]", "terms = [rng.randint(-8, 12)]",
             "terms = [rng.randint(1, 9)]"),
    ),
    "blackbox": (
        knob("size = 6 + 6 * self.difficulty", "size = 4 + 4 * self.difficulty",
             "size = 8 + 6 * self.difficulty"),
        knob("range(5, 13 + 10 * self.difficulty)", "range(4, 12 + 10 * self.difficulty)",
             "range(6, 16 + 10 * self.difficulty)"),
        knob("degree = rng.choice([2, 3])", "degree = rng.choice([1, 2, 3])",
             "degree = 3"),
    ),
    "triples": (
        knob("rng.sample(sorted(self.RULES), 7 + self.difficulty)",
             "rng.sample(sorted(self.RULES), 6 + self.difficulty)",
             "rng.sample(sorted(self.RULES), 8 + self.difficulty)"),
        knob("GUESS_REWARDS = (1.0, 0.5, 0.2)", "GUESS_REWARDS = (1.0, 0.4, 0.1)",
             "GUESS_REWARDS = (1.0, 0.6, 0.3)"),
        knob("for a in range(1, 13) for b in range(1, 13) for c in range(1, 13)",
             "for a in range(1, 11) for b in range(1, 11) for c in range(1, 11)",
             "for a in range(1, 16) for b in range(1, 16) for c in range(1, 16)"),
    ),
    "coins": (
        knob("((14, 27), (28, 81), (82, 243))", "((10, 27), (28, 81), (82, 200))",
             "((20, 27), (50, 81), (150, 243))"),
        knob("0.6 if extra == 1 else 0.3", "0.5 if extra == 1 else 0.2",
             "0.7 if extra == 1 else 0.3"),
    ),
    "switches": (
        knob("((5, 8), (9, 16), (17, 32))", "((4, 8), (9, 16), (17, 30))",
             "((6, 8), (10, 16), (20, 32))"),
        knob("0.3 * right / self.n", "0.2 * right / self.n", "0.4 * right / self.n"),
        knob("reward = 1.0 if self.tests <= self.budget else 0.6",
             "reward = 1.0 if self.tests <= self.budget else 0.5"),
    ),
    "sorting": (
        knob('"ABCDEFGHJKMNPQRSTUVWXYZ"', '"ABCDEFGHJKLMN"', '"KLMNPQRSTUVWXYZ"'),
        knob("tier = 1.0 if self.compares <= self.FULL_MARKS[self.difficulty] else 0.6",
             "tier = 1.0 if self.compares <= self.FULL_MARKS[self.difficulty] else 0.5"),
        knob("0.1 * right", "0.05 * right", "0.15 * right"),
        knob("rng.sample(range(1, 100), self.n)", "rng.sample(range(1, 500), self.n)"),
    ),
}

# Edits any seed may take where its text has them (every occurrence is replaced).
EPISODE_OVER = ("The episode is over.", "This episode has ended.", "The game is over.",
                "Nothing more to do: the episode is over.")
CANNOT_PARSE = ("Could not parse", "Cannot read", "Unreadable action")

# The action words of each game, drawn anew a variant (variants.rename_verbs) so that the
# words to play can only be read from the observation: an agent trained on fixed words replies
# in them on any game, and a held-out game's own words never come up. The compass words are
# arguments, drawn too, so that an argument word must be read as well (an agent that only ever
# had its arguments' words fixed writes a number after any action word: bench/RESULTS_LOG.md,
# 2026-12-05). Words the prose also uses as another part of speech ("empty" jugs, "set" bits,
# "rule" in triples) are left alone.
_COMPASS = ("north", "east", "south", "west")
ACTION_VERBS = {
    "mastermind": ("guess",), "minisudoku": ("set",), "clue": ("suggest", "accuse"),
    "bridge": ("cross",), "jugs": ("fill", "pour"), "pancakes": ("flip",),
    "hotcold": ("probe", "dig"), "robot": ("move", *_COMPASS), "dice": ("roll", *_COMPASS),
    "countdown": ("combine", "restart"), "prices": ("buy", "answer"), "magic": ("set",),
    "sequence": ("predict",), "blackbox": ("query", "answer"), "triples": ("test",),
    "coins": ("weigh", "answer"), "switches": ("answer",), "sorting": ("compare", "answer"),
}
KEEP_VERB = 0.25  # the chance that an action word stays the seed's own
# A drawn word is a whole vocabulary piece of the build's tokenizer: ` word` (space, then
# ACTION_WORD) spelt as one token (variants.action_words). A pool of real verbs taught the agent
# to guess pool verbs; made-up words split into a few shared onset pieces (` d`, ` g`, ` br`)
# that the agent learned to guess instead of reading the word (bench/RESULTS_LOG.md, 2026-12-04
# and -05). Among thousands of one-piece words the first piece can only be read, not guessed.
ACTION_WORD = re.compile(r"[a-z]{4,10}")
MIN_ACTION_WORDS = 500  # a smaller pool would let the agent guess again
