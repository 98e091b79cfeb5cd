"""Mastermind: deduce a hidden code of digits from exact/misplaced feedback."""
import random
import re


class Mastermind:
  """Each guess is scored as (exact, misplaced); progress in exact hits pays a little."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.length = 3
    self.symbols = rng.choice([5, 6]) + self.difficulty  # more symbols
    self.code = [rng.randint(1, self.symbols) for _ in range(self.length)]
    self.turn, self.total, self.best, self.done = 0, 0.0, 0, False
    obs = (f"A secret code of {self.length} digits, each from 1 to {self.symbols} (repeats "
           f"allowed), is hidden. After each guess you learn how many digits are exact (right "
           f"digit, right place) and how many are misplaced (right digit, wrong place). You "
           f"have {self.max_turns} guesses. Action format: guess D D D (for example: guess 1 2 "
           f"{self.symbols}).")
    return obs, {"length": self.length, "symbols": self.symbols}

  def _score(self, guess):
    exact = sum(g == c for g, c in zip(guess, self.code, strict=True))
    common = sum(min(guess.count(d), self.code.count(d)) for d in set(guess))
    return exact, common - exact

  def _finish(self, obs, reward, terminated):
    self.turn += 1
    reward = max(0.0, min(reward, 1.0 - self.total))
    self.total += reward
    truncated = not terminated and self.turn >= self.max_turns
    self.done = terminated or truncated
    if truncated:
      obs += " Out of guesses; the code was " + " ".join(map(str, self.code)) + "."
    return obs, reward, terminated, truncated, {"turn": self.turn}

  def step(self, action):
    if self.done:
      return "The episode is over.", 0.0, True, False, {}
    text = str(action).strip().lower()
    match = re.fullmatch(r"guess\s*[:=]?\s*([\d\s,]+)", text)
    digits = [int(d) for d in re.findall(r"\d", match.group(1))] if match else []
    if len(digits) != self.length or not all(1 <= d <= self.symbols for d in digits):
      return self._finish(
          f"Could not read a guess from {text[:40]!r}. Write: guess followed by "
          f"{self.length} digits from 1 to {self.symbols}, e.g. guess 1 1 2.", 0.0, False)
    exact, misplaced = self._score(digits)
    shown = " ".join(map(str, digits))
    if exact == self.length:
      return self._finish(f"Guess {shown}: exact {exact}, misplaced 0. Solved!", 1.0, True)
    reward = 0.1 * max(0, exact - self.best)
    self.best = max(self.best, exact)
    return self._finish(f"Guess {shown}: exact {exact}, misplaced {misplaced}.", reward, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return ["guess " + " ".join(map(str, self.code))]
