"""Black-box polynomial: query a hidden function, then predict it at three points."""
import random
import re


class BlackBoxPolynomial:
  """A hidden integer polynomial of degree <= 3; each correct prediction pays a third."""

  max_turns = 6
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    degree = rng.choice([2, 3])
    while True:
      size = 6 + 6 * self.difficulty  # larger coefficients and points
      self.coeffs = [rng.randint(-size, size) for _ in range(degree + 1)]
      if self.coeffs[-1] != 0:
        break
    self.points = sorted(rng.sample(range(5, 13 + 10 * self.difficulty), 3))
    self.answered = {}
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"A machine computes a hidden function f of an integer x. Actions: query X (shows "
           f"f(X); -10 <= X <= 10, X not in {self.points}) | answer V1 V2 V3 (your values of "
           f"f({self.points[0]}), f({self.points[1]}) and f({self.points[2]}); ends the game). "
           f"Each correct value scores a third. {self.max_turns} actions.")
    return obs, {"points": self.points}

  def _f(self, x):
    return sum(c * x ** i for i, c in enumerate(self.coeffs))

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
    query = re.fullmatch(r"query\s+(-?\d{1,3})", text)
    answer = re.fullmatch(r"answer\s+(-?\d{1,8})[\s,]+(-?\d{1,8})[\s,]+(-?\d{1,8})", text)
    if query:
      x = int(query.group(1))
      if not -10 <= x <= 10 or x in self.points:
        return self._finish(f"X must be in -10..10 and not one of {self.points}.", 0.0, False)
      return self._finish(f"f({x}) = {self._f(x)}.", 0.0, False)
    if answer:
      values = [int(v) for v in answer.groups()]
      right = sum(v == self._f(x) for v, x in zip(values, self.points, strict=True))
      truth = ", ".join(f"f({x}) = {self._f(x)}" for x in self.points)
      return self._finish(f"{right} of 3 correct ({truth}).", right / 3, True)
    return self._finish(f"Could not parse {text[:40]!r}. Use: query X or answer V1 V2 V3.",
                        0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return ["answer " + " ".join(str(self._f(x)) for x in self.points)]
