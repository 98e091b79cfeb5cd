"""Magic square: complete a 3x3 magic square from three revealed cells."""
import random
import re


class MagicSquare:
  """Rows, columns and both diagonals share one sum. Each correct cell pays 1/6."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  # Every 3x3 magic square is centre c plus offsets a, b in this pattern: (c, a, b) weights.
  PATTERN = [[(1, 0, -1), (1, 1, 1), (1, -1, 0)],
             [(1, -1, 1), (1, 0, 0), (1, 1, -1)],
             [(1, 1, 0), (1, -1, -1), (1, 0, 1)]]

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      spread = 7 + 6 * self.difficulty  # larger, more spread-out numbers
      c = rng.randint(8, 30 + 30 * self.difficulty)
      a, b = rng.randint(-spread, spread), rng.randint(-spread, spread)
      values = [c * w0 + a * w1 + b * w2 for row in self.PATTERN for w0, w1, w2 in row]
      if len(set(values)) == 9 and min(values) > 0:
        break
    self.solution = [values[0:3], values[3:6], values[6:9]]
    cells = [(r, k) for r in range(3) for k in range(3)]
    while True:
      shown = rng.sample(cells, 3)
      if self._determinant([self.PATTERN[r][k] for r, k in shown]) != 0:
        break
    self.grid = [[self.solution[r][k] if (r, k) in shown else 0 for k in range(3)]
                 for r in range(3)]
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"Complete this 3x3 magic square (every row, column and both diagonals have the same "
           f"sum; the nine numbers are distinct positive integers). Rows and columns are "
           f"numbered 1-3; '.' is blank.\n{self._show()}\nAction format: set ROW COL VALUE. Each "
           f"correct cell scores; a wrong value is rejected. {self.max_turns} actions.")
    return obs, {}

  def _determinant(self, m):
    return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))

  def _show(self):
    return "\n".join(" ".join(f"{v:>3}" if v else "  ." for v in row) for row in self.grid)

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
    match = re.fullmatch(r"set\s+([1-3])[\s,]+([1-3])[\s,]+(-?\d{1,4})", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: set ROW COL VALUE, e.g. set 1 2 "
                          f"15.\n{self._show()}", 0.0, False)
    r, k, v = int(match.group(1)) - 1, int(match.group(2)) - 1, int(match.group(3))
    if self.grid[r][k]:
      return self._finish(f"Cell ({r + 1},{k + 1}) is already filled.\n{self._show()}", 0.0, False)
    if self.solution[r][k] != v:
      return self._finish(f"{v} is not right for ({r + 1},{k + 1}).\n{self._show()}", 0.0, False)
    self.grid[r][k] = v
    solved = all(all(row) for row in self.grid)
    return self._finish(("Solved!\n" if solved else "Correct.\n") + self._show(), 1 / 6, solved)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"set {r + 1} {k + 1} {self.solution[r][k]}" for r in range(3) for k in range(3)
            if not self.grid[r][k]]
