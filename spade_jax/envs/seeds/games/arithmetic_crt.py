"""Remainder oracle: identify a hidden number from its remainders."""
import random
import re


class RemainderOracle:
  """`mod M` reveals the hidden number modulo M (2..12); fewer queries score more."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.limit = rng.randint(300 + 250 * self.difficulty, 924)  # more candidates
    self.secret = rng.randrange(self.limit)
    self.asked = {}
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"I hide a whole number N with 0 <= N < {self.limit}. Ask for its remainder modulo "
           f"any M from 2 to 12, then name N. Actions: mod M | answer N. Three or fewer queries "
           f"earn full marks; more queries earn less. {self.max_turns} actions.")
    return obs, {"limit": self.limit}

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
    match = re.fullmatch(r"(mod|answer)\s+(-?\d{1,6})", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: mod M (2 <= M <= 12) or "
                          "answer N.", 0.0, False)
    value = int(match.group(2))
    if match.group(1) == "mod":
      if not 2 <= value <= 12:
        return self._finish("M must be between 2 and 12.", 0.0, False)
      self.asked[value] = self.secret % value
      return self._finish(f"N mod {value} = {self.asked[value]}.", 0.0, False)
    queries = len(self.asked)
    if value == self.secret:
      reward = 1.0 if queries <= 3 else 0.6 if queries <= 5 else 0.3
      return self._finish(f"Correct, N = {value} ({queries} queries).", reward, True)
    close = abs(value - self.secret) <= 2
    return self._finish(f"Wrong, N was {self.secret}.", 0.1 if close else 0.0, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"answer {self.secret}"]
