"""Countdown numbers: combine four numbers step by step to hit a target exactly."""
import random
import re


class CountdownNumbers:
  """Each step merges two numbers with + - * /; closeness pays when numbers run out."""

  max_turns = 6
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      hi, lo = 12 + 6 * self.difficulty, 25 * (1 + self.difficulty)  # bigger numbers
      a, b = rng.randint(3, hi), rng.randint(3, hi)
      c, d = rng.randint(2, lo), rng.randint(2, lo)
      self.target = a * b + c - d
      self.numbers = [a, b, c, d]
      self.recipe = (a, b, c, d)
      if self.target > 30 and len(set(self.numbers)) == 4 and not self._trivial():
        break
    rng.shuffle(self.numbers)
    self.start = list(self.numbers)
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"Numbers: {self._show()}. Target: {self.target}. Actions: combine A OP B (replaces "
           f"two current numbers by their result; OP one of + - * /, division must be exact) | "
           f"restart (restores the starting numbers). Reach the target exactly; when one number "
           f"is left you score by how close it is. {self.max_turns} actions.")
    return obs, {"target": self.target}

  def _trivial(self):
    n = self.numbers
    return any(x * y == self.target or x + y == self.target for x in n for y in n if x is not y)

  def _show(self):
    return " ".join(map(str, self.numbers))

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
    if text == "restart":
      self.numbers = list(self.start)
      return self._finish(f"Numbers: {self._show()}. Target: {self.target}.", 0.0, False)
    match = re.fullmatch(r"combine\s+(-?\d+)\s*([-+*/x])\s*(-?\d+)", text)
    pool, ok = list(self.numbers), False
    if match:
      left, op, right = int(match.group(1)), match.group(2), int(match.group(3))
      if left in pool:
        pool.remove(left)
        ok = right in pool and not (op == "/" and (right == 0 or left % right))
    if not ok:
      return self._finish(f"Cannot do {text[:40]!r}. Use: combine A OP B with A and B among "
                          f"{self._show()} (OP + - * /, exact division).", 0.0, False)
    pool.remove(right)
    value = left // right if op == "/" else self.OPS["*" if op == "x" else op](left, right)
    self.numbers = pool + [value]
    if value == self.target:
      return self._finish(f"{left} {op} {right} = {value}. Target hit!", 1.0, True)
    if len(self.numbers) > 1:
      return self._finish(f"{left} {op} {right} = {value}. Numbers: {self._show()}.", 0.0, False)
    gap = abs(value - self.target)
    reward = 0.5 if gap <= 2 else 0.25 if gap <= 10 else 0.0
    return self._finish(f"{left} {op} {right} = {value}; {gap} away from {self.target}.",
                        reward, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    a, b, c, d = self.recipe
    return [f"combine {a} * {b}", f"combine {a * b} + {c}", f"combine {a * b + c} - {d}"]
