"""Secret rule (2-4-6 task): find which rule accepts triples by testing your own."""
import random
import re


class SecretRule:
  """One rule from a shown menu is secret; tests answer yes/no. Early correct guesses pay most."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  RULES = {
      "strictly increasing": lambda t: t[0] < t[1] < t[2],
      "all even": lambda t: all(v % 2 == 0 for v in t),
      "sum greater than 20": lambda t: sum(t) > 20,
      "middle number is the largest": lambda t: t[1] > t[0] and t[1] > t[2],
      "all different": lambda t: len(set(t)) == 3,
      "first number is the smallest": lambda t: t[0] < t[1] and t[0] < t[2],
      "contains a multiple of 5": lambda t: any(v % 5 == 0 for v in t),
      "at least two odd numbers": lambda t: sum(v % 2 for v in t) >= 2,
      "last equals first plus middle": lambda t: t[2] == t[0] + t[1],
      "each step adds the same amount": lambda t: t[1] - t[0] == t[2] - t[1],
  }
  GUESS_REWARDS = (1.0, 0.5, 0.2)

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.menu = rng.sample(sorted(self.RULES), 7 + self.difficulty)  # longer menu
    self.secret = rng.choice(self.menu)
    triples = [(a, b, c) for a in range(1, 13) for b in range(1, 13) for c in range(1, 13)]
    passing = [t for t in triples if self.RULES[self.secret](t)]
    fits = lambda t: sum(self.RULES[name](t) for name in self.menu)
    best = max(fits(t) for t in passing)
    self.example = rng.choice([t for t in passing if fits(t) == best])
    self.guesses = 0
    self.turn, self.total, self.done = 0, 0.0, False
    menu = "\n".join(f"  {i + 1}. {name}" for i, name in enumerate(self.menu))
    obs = (f"A secret rule decides which triples of integers are accepted. The triple "
           f"{' '.join(map(str, self.example))} is accepted. The rule is one of:\n{menu}\n"
           f"Actions: test A B C (integers from -99 to 99; answers yes or no) | rule K (your "
           f"guess, by number; 3 guesses at most). {self.max_turns} actions.")
    return obs, {"menu": self.menu}

  def _finish(self, obs, reward, terminated):
    self.turn += 1
    reward = max(0.0, min(reward, 1.0 - self.total))
    self.total += reward
    truncated = not terminated and self.turn >= self.max_turns
    self.done = terminated or truncated
    return obs, reward, terminated, truncated, {"turn": self.turn}

  def step(self, action):
    if self.done:
      return "The episode is over.", 0.0, True, False, {}
    text = str(action).strip().lower()
    test = re.fullmatch(r"test\s+(-?\d{1,2})[\s,]+(-?\d{1,2})[\s,]+(-?\d{1,2})", text)
    guess = re.fullmatch(r"rule\s+(\d{1,2})", text)
    if test:
      triple = tuple(int(v) for v in test.groups())
      verdict = "yes" if self.RULES[self.secret](triple) else "no"
      return self._finish(f"{' '.join(test.groups())}: {verdict}.", 0.0, False)
    if not guess or not 1 <= int(guess.group(1)) <= len(self.menu):
      return self._finish(f"Could not parse {text[:40]!r}. Use: test A B C or rule K with K from "
                          f"1 to {len(self.menu)}.", 0.0, False)
    self.guesses += 1
    if self.menu[int(guess.group(1)) - 1] == self.secret:
      return self._finish(f"Correct: the rule is '{self.secret}'.",
                          self.GUESS_REWARDS[self.guesses - 1], True)
    if self.guesses == len(self.GUESS_REWARDS):
      return self._finish(f"Wrong. The rule was '{self.secret}'.", 0.0, True)
    return self._finish("Wrong rule. Keep testing or guess again.", 0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"rule {self.menu.index(self.secret) + 1}"]
