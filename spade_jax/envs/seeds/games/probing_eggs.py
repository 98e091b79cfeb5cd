"""Egg drop: find the highest safe floor with only two eggs."""
import random
import re


class EggDrop:
  """A broken egg is gone; a survivor can be reused. Only the final answer scores."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.floors = rng.randint((15, 21)[self.difficulty], 28)  # taller buildings
    self.safe = rng.randint(0, self.floors)
    self.eggs, self.drops = 2, 0
    self.budget = next(d for d in range(1, 30) if d * (d + 1) // 2 >= self.floors)
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"A building has floors 1 to {self.floors}. An egg dropped from floor F breaks "
           f"exactly when F is above some unknown safe height H (0 <= H <= {self.floors}); "
           f"an egg that survives can be dropped again. You have 2 eggs. Actions: drop F | "
           f"answer H (ends the game). A correct answer after at most {self.budget} drops earns "
           f"full marks, after more drops half. {self.max_turns} actions in all.")
    return obs, {"floors": self.floors}

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
    match = re.fullmatch(r"(drop|answer)\s+(\d{1,3})", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: drop F (1 <= F <= "
                          f"{self.floors}) or answer H.", 0.0, False)
    value = int(match.group(2))
    if match.group(1) == "answer":
      if value == self.safe:
        reward = 1.0 if self.drops <= self.budget else 0.5
        return self._finish(f"Correct: H = {value} after {self.drops} drops.", reward, True)
      near = abs(value - self.safe) == 1
      return self._finish(f"Wrong: H was {self.safe}.", 0.2 if near else 0.0, True)
    if not 1 <= value <= self.floors:
      return self._finish(f"Floor must be between 1 and {self.floors}.", 0.0, False)
    if self.eggs == 0:
      return self._finish("You have no eggs left; answer H now.", 0.0, False)
    self.drops += 1
    if value > self.safe:
      self.eggs -= 1
      return self._finish(f"Drop from floor {value}: the egg breaks. Eggs left: {self.eggs}.",
                          0.0, False)
    return self._finish(f"Drop from floor {value}: the egg survives. Eggs left: {self.eggs}.",
                        0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"answer {self.safe}"]
