"""Rolling die: roll a die across a grid so it stops on a goal cell with a given top face."""
import collections
import random
import re


class RollingDie:
  """Only the top face is reported; the other faces must be tracked mentally."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  ROLLS = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      reach = 2 + 2 * self.difficulty  # farther goals, longer rolls
      self.goal = (rng.randint(-reach, reach), rng.randint(-reach, reach))
      self.goal_top = rng.randint(1, 6)
      plan = self._plan()
      self.optimal = None if plan is None else len(plan)
      if self.optimal is not None and 3 + self.difficulty <= self.optimal <= 5 + self.difficulty:
        break
    self.die, self.pos = (1, 2, 3), (0, 0)
    self.turn, self.moves, self.total, self.visited, self.done = 0, 0, 0.0, False, False
    obs = (f"A standard die (opposite faces sum to 7) lies on a grid at (0, 0) with 1 on top, 2 "
           f"facing north and 3 facing east. x grows to the east, y to the north. Roll it so it "
           f"rests on {self.goal} with {self.goal_top} on top. Action format: roll DIRECTION "
           f"(north, south, east or west); each roll tips the die over one edge onto the next "
           f"cell. After each roll you see its position and top face. {self.max_turns} rolls.")
    return obs, {"goal": list(self.goal), "goal_top": self.goal_top}

  def _roll(self, die, direction):
    top, north, east = die
    if direction == "north":
      return 7 - north, top, east
    if direction == "south":
      return north, 7 - top, east
    if direction == "east":
      return 7 - east, north, top
    return east, north, 7 - top

  def _plan(self):
    """The shortest list of roll directions to the goal (breadth-first, depth <= 8), or None."""
    start = ((0, 0), (1, 2, 3))
    parent, depth, queue = {start: None}, {start: 0}, collections.deque([start])
    while queue:
      state = queue.popleft()
      pos, die = state
      if pos == self.goal and die[0] == self.goal_top:
        plan = []
        while parent[state] is not None:
          state, name = parent[state]
          plan.append(name)
        return plan[::-1]
      for name, (dx, dy) in self.ROLLS.items():
        nxt = ((pos[0] + dx, pos[1] + dy), self._roll(die, name))
        if nxt not in parent and depth[state] < 8:
          parent[nxt], depth[nxt] = (state, name), depth[state] + 1
          queue.append(nxt)
    return None

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
    match = re.fullmatch(r"roll\s+(north|south|east|west)", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: roll north|south|east|west. "
                          f"Die at {self.pos}, top {self.die[0]}.", 0.0, False)
    dx, dy = self.ROLLS[match.group(1)]
    self.pos = (self.pos[0] + dx, self.pos[1] + dy)
    self.die = self._roll(self.die, match.group(1))
    self.moves += 1
    state = f"Die at {self.pos}, top face {self.die[0]}."
    if self.pos == self.goal and self.die[0] == self.goal_top:
      tier = 1.0 if self.moves <= self.optimal + 2 else 0.7
      return self._finish(f"{state} Goal reached in {self.moves} rolls!", tier - self.total, True)
    if self.pos == self.goal and not self.visited:
      self.visited = True
      return self._finish(f"{state} Right cell, wrong face.", 0.2, False)
    return self._finish(state, 0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"roll {direction}" for direction in self._plan()]
