"""Mini sudoku: fill the blanks of a 4x4 sudoku one cell at a time."""
import random
import re


class MiniSudoku:
  """A 4x4 grid; rows, columns and 2x2 boxes hold 1-4 once. Each correct cell pays."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  BLANKS = 6

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.blanks = self.BLANKS + self.difficulty  # more blank cells
    digits = rng.sample([1, 2, 3, 4], 4)
    rows = rng.sample([0, 1], 2) + rng.sample([2, 3], 2)
    if rng.random() < 0.5:
      rows = rows[2:] + rows[:2]
    cols = rng.sample([0, 1], 2) + rng.sample([2, 3], 2)
    base = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
    self.solution = [[digits[base[r][c] - 1] for c in cols] for r in rows]
    cells = [(r, c) for r in range(4) for c in range(4)]
    while True:
      blanks = set(rng.sample(cells, self.blanks))
      grid = [[0 if (r, c) in blanks else self.solution[r][c] for c in range(4)] for r in range(4)]
      if self._singles_solve(grid):
        break
    self.grid = [[0 if (r, c) in blanks else self.solution[r][c] for c in range(4)]
                 for r in range(4)]
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"Fill the 4x4 sudoku: every row, column and 2x2 box must contain 1, 2, 3 and 4 "
           f"exactly once. Blank cells are '.', rows and columns are numbered 1-4.\n"
           f"{self._show()}\nAction format: set ROW COL VALUE (e.g. set 2 3 4). Each correct "
           f"cell scores; a wrong value is rejected. {self.max_turns} actions.")
    return obs, {"blanks": self.blanks}

  def _candidates(self, grid, r, c):
    box = {grid[i][j] for i in range(r // 2 * 2, r // 2 * 2 + 2)
           for j in range(c // 2 * 2, c // 2 * 2 + 2)}
    used = set(grid[r]) | {grid[i][c] for i in range(4)} | box
    return [v for v in range(1, 5) if v not in used]

  def _singles_solve(self, grid):
    progress = True
    while progress:
      progress = False
      for r in range(4):
        for c in range(4):
          options = self._candidates(grid, r, c) if grid[r][c] == 0 else []
          if len(options) == 1:
            grid[r][c], progress = options[0], True
    return all(all(row) for row in grid)

  def _show(self):
    return "\n".join(" ".join(str(v) if v else "." for v in row) for row in self.grid)

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
    match = re.fullmatch(r"set\s+([1-4])[\s,]+([1-4])[\s,]+([1-4])", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: set ROW COL VALUE with each "
                          f"number from 1 to 4.\n{self._show()}", 0.0, False)
    r, c, v = (int(g) for g in match.groups())
    if self.grid[r - 1][c - 1]:
      return self._finish(f"Cell ({r},{c}) is already filled.\n{self._show()}", 0.0, False)
    if self.solution[r - 1][c - 1] != v:
      return self._finish(f"{v} does not belong at ({r},{c}).\n{self._show()}", 0.0, False)
    self.grid[r - 1][c - 1] = v
    solved = all(all(row) for row in self.grid)
    note = "Solved!" if solved else "Correct."
    return self._finish(f"{note}\n{self._show()}", 1.0 / self.blanks, solved)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"set {r + 1} {c + 1} {self.solution[r][c]}" for r in range(4) for c in range(4)
            if not self.grid[r][c]]
