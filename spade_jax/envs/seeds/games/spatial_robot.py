"""Miscalibrated robot: reach a goal although the robot's compass is rotated."""
import random
import re


class RotatedRobot:
  """Commands are turned by a hidden multiple of 90 degrees; few moves score most."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  DIRS = {"north": (0, 1), "east": (1, 0), "south": (0, -1), "west": (-1, 0)}
  ORDER = ["north", "east", "south", "west"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.rotation = rng.choice([1, 2, 3])
    while True:
      reach = 6 + self.difficulty  # farther goals
      self.goal = (rng.randint(-reach, reach), rng.randint(-reach, reach))
      far = abs(self.goal[0]) + abs(self.goal[1]) >= 4 + 2 * self.difficulty
      if self.goal[0] and self.goal[1] and far:
        break
    self.pos = (0, 0)
    self.turn, self.moves, self.total, self.best, self.done = 0, 0, 0.0, self._dist(), False
    obs = (f"You steer a robot on an open grid. It stands at (0, 0); the goal is at "
           f"{self.goal}. x grows to the east, y to the north. Action format: move DIRECTION "
           f"STEPS, DIRECTION one of north, east, south, west, STEPS from 1 to 9. The robot "
           f"reports its position after every move. Reach the goal in as few moves as "
           f"possible; {self.max_turns} actions.")
    return obs, {"goal": list(self.goal)}

  def _dist(self):
    return abs(self.pos[0] - self.goal[0]) + abs(self.pos[1] - self.goal[1])

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
    match = re.fullmatch(r"move\s+(north|east|south|west)\s+([1-9])", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: move DIRECTION STEPS, e.g. move "
                          f"north 2. Robot at {self.pos}.", 0.0, False)
    heading = self.ORDER[(self.ORDER.index(match.group(1)) + self.rotation) % 4]
    dx, dy = self.DIRS[heading]
    steps = int(match.group(2))
    self.pos = (self.pos[0] + dx * steps, self.pos[1] + dy * steps)
    self.moves += 1
    if self.pos == self.goal:
      tier = 1.0 if self.moves <= 3 else 0.7 if self.moves <= 5 else 0.4
      return self._finish(f"Robot at {self.pos}: goal reached in {self.moves} moves!",
                          tier - self.total, True)
    reward = 0.05 if self._dist() < self.best else 0.0
    self.best = min(self.best, self._dist())
    return self._finish(f"Robot at {self.pos}. Goal at {self.goal}.", reward, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    moves = []
    for heading, steps in (("east", self.goal[0]), ("north", self.goal[1])):
      if steps < 0:
        heading, steps = self.ORDER[(self.ORDER.index(heading) + 2) % 4], -steps
      wanted = self.ORDER[(self.ORDER.index(heading) - self.rotation) % 4]
      moves.append(f"move {wanted} {steps}")
    return moves
