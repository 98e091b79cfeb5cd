"""Pancake sorting: order a stack by flipping its top part with a spatula."""
import random
import re


class PancakeFlip:
  """Each pancake newly settled at the bottom pays; a sorted stack pays the rest."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  SIZE = 5

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      self.stack = rng.sample(range(1, self.SIZE + 1), self.SIZE)
      if len(self.oracle_actions()) >= 4 + self.difficulty:  # more flips needed
        break
    self.best = self._settled()
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"A stack of {self.SIZE} pancakes, sizes 1 (smallest) to {self.SIZE}, listed top to "
           f"bottom. Sort it so the smallest is on top and the largest at the bottom. "
           f"Action format: flip K (reverse the order of the top K pancakes, 2 <= K <= "
           f"{self.SIZE}). {self.max_turns} flips at most. {self._show()}")
    return obs, {"size": self.SIZE}

  def _settled(self):
    count = 0
    for i in range(self.SIZE - 1, -1, -1):
      if self.stack[i] != i + 1:
        break
      count += 1
    return count

  def _show(self):
    return "Stack (top to bottom): " + " ".join(map(str, self.stack)) + "."

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
    match = re.fullmatch(r"flip\s+(\d+)", text)
    k = int(match.group(1)) if match else 0
    if not 2 <= k <= self.SIZE:
      return self._finish(f"Invalid action {text[:40]!r}. Use: flip K with K from 2 to "
                          f"{self.SIZE}. {self._show()}", 0.0, False)
    self.stack[:k] = self.stack[:k][::-1]
    settled = self._settled()
    if settled == self.SIZE:
      return self._finish(f"{self._show()} Sorted!", 1.0, True)
    reward = 0.1 * max(0, settled - self.best)
    self.best = max(self.best, settled)
    return self._finish(self._show(), reward, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    stack, flips = list(self.stack), []
    for size in range(self.SIZE, 1, -1):
      where = stack.index(size)
      if where == size - 1:
        continue
      if where > 0:
        stack[:where + 1] = stack[:where + 1][::-1]
        flips.append(f"flip {where + 1}")
      stack[:size] = stack[:size][::-1]
      flips.append(f"flip {size}")
    return flips
