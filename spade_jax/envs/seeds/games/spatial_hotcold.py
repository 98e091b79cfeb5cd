"""Treasure detector: locate a buried treasure on a grid from distance readings."""
import random
import re


class TreasureDetector:
  """`probe` reads the detector at a cell; `dig` ends the hunt. Fewer actions score more."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    low, high = 8 + 6 * self.difficulty, 14 + 6 * self.difficulty  # larger fields
    self.width, self.height = rng.randint(low, high), rng.randint(low, high)
    self.treasure = (rng.randrange(self.width), rng.randrange(self.height))
    self.turn, self.actions, self.total, self.done = 0, 0, 0.0, False
    obs = (f"A treasure is buried in a {self.width} x {self.height} field; x runs "
           f"0..{self.width - 1} (west to east), y runs 0..{self.height - 1} (south to north). "
           f"Your detector shows a number that grows with the distance to the treasure. "
           f"Actions: probe X Y | dig X Y. Digging the right cell wins; the fewer actions you "
           f"use, the more it is worth. {self.max_turns} actions.")
    return obs, {"width": self.width, "height": self.height}

  def _reading(self, x, y):
    return abs(x - self.treasure[0]) + abs(y - self.treasure[1])

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
    match = re.fullmatch(r"(probe|dig)\s*\(?\s*(-?\d+)\s*[, ]\s*(-?\d+)\s*\)?", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: probe X Y or dig X Y with "
                          "integer coordinates.", 0.0, False)
    verb, x, y = match.group(1), int(match.group(2)), int(match.group(3))
    if not (0 <= x < self.width and 0 <= y < self.height):
      return self._finish(f"({x}, {y}) is outside the field.", 0.0, False)
    self.actions += 1
    if verb == "probe":
      return self._finish(f"Detector at ({x}, {y}) reads {self._reading(x, y)}.", 0.0, False)
    if (x, y) == self.treasure:
      reward = 1.0 if self.actions <= 3 else 0.6 if self.actions <= 5 else 0.3
      return self._finish(f"You dug up the treasure with {self.actions} actions!", reward, True)
    return self._finish(f"Nothing at ({x}, {y}); the detector there reads "
                        f"{self._reading(x, y)}.", 0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return ["dig {} {}".format(*self.treasure)]
