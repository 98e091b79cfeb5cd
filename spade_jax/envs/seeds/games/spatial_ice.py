"""Ice rink: slide across a frozen grid (you stop only at rocks or the edge) to the goal."""
import collections
import random
import re


class IceSlide:
  """Each move slides until blocked; getting closer (in moves) pays a little."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  SIZE = 7
  DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

  def reset(self, seed=None):
    rng = random.Random(seed)
    cells = [(r, c) for r in range(self.SIZE) for c in range(self.SIZE)]
    while True:
      picks = rng.sample(cells, 12)
      self.rocks, self.start, self.goal = set(picks[2:]), picks[0], picks[1]
      self.dist = self._distances()
      if 3 + self.difficulty <= self.dist.get(self.start, 99) <= 6 + self.difficulty:
        break
    self.pos = self.start
    self.best = self.dist[self.start]
    self.turn, self.moves, self.total, self.done = 0, 0, 0.0, False
    obs = ("You stand on a frozen pond (row 1 is the top). '#' is a rock, 'G' the goal, 'P' "
           "you. A move slides you in that direction until the next cell is a rock or the "
           "edge; you only reach the goal by stopping on it. Action format: move up|down|"
           f"left|right. {self.max_turns} moves.\n{self._show()}")
    return obs, {"size": self.SIZE}

  def _slide(self, pos, direction):
    dr, dc = self.DIRS[direction]
    r, c = pos
    while (0 <= r + dr < self.SIZE and 0 <= c + dc < self.SIZE
           and (r + dr, c + dc) not in self.rocks):
      r, c = r + dr, c + dc
    return r, c

  def _distances(self):
    reverse = collections.defaultdict(set)
    for r in range(self.SIZE):
      for c in range(self.SIZE):
        if (r, c) not in self.rocks:
          for d in self.DIRS:
            reverse[self._slide((r, c), d)].add((r, c))
    dist, queue = {self.goal: 0}, collections.deque([self.goal])
    while queue:
      cell = queue.popleft()
      for prev in reverse[cell]:
        if prev not in dist:
          dist[prev] = dist[cell] + 1
          queue.append(prev)
    return dist

  def _show(self):
    rows = []
    for r in range(self.SIZE):
      row = ["#" if (r, c) in self.rocks else "P" if (r, c) == self.pos else
             "G" if (r, c) == self.goal else "." for c in range(self.SIZE)]
      rows.append("".join(row))
    return "\n".join(rows)

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
    match = re.fullmatch(r"(?:move\s+)?(up|down|left|right)", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: move up, move down, move left "
                          f"or move right.\n{self._show()}", 0.0, False)
    self.pos = self._slide(self.pos, match.group(1))
    self.moves += 1
    if self.pos == self.goal:
      tier = 1.0 if self.moves <= self.dist[self.start] + 1 else 0.6
      return self._finish(f"You stopped on the goal in {self.moves} moves!\n{self._show()}",
                          tier - self.total, True)
    remaining = self.dist.get(self.pos, 99)
    reward = 0.1 if remaining < self.best else 0.0
    self.best = min(self.best, remaining)
    return self._finish(self._show(), reward, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    pos, moves = self.pos, []
    while pos != self.goal:
      step = next(d for d in self.DIRS
                  if self.dist.get(self._slide(pos, d), 99) == self.dist[pos] - 1)
      moves.append(f"move {step}")
      pos = self._slide(pos, step)
    return moves
