"""Tower of Hanoi from a scrambled position: gather every disk on the target peg."""
import random
import re


class ScrambledHanoi:
  """Disks start scattered over three pegs; settling the big disks first pays."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  PEGS = "ABC"

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      self.pos = {d: rng.choice(self.PEGS) for d in (1, 2, 3)}
      self.target = rng.choice(self.PEGS)
      self.optimal = len(self._plan(dict(self.pos)))
      if (4, 6)[self.difficulty] <= self.optimal <= 7:  # longer plans at level 1
        break
    self.settled = self._settled()
    self.turn, self.moves, self.total, self.done = 0, 0, 0.0, False
    obs = (f"Three disks (1 small, 2 medium, 3 large) sit on pegs A, B and C. Move them all onto "
           f"peg {self.target}, largest at the bottom. Move one top disk at a time and never put "
           f"a disk on a smaller one. Action format: move FROM TO (e.g. move A C). "
           f"{self._show()}")
    return obs, {"target": self.target}

  def _plan(self, pos):
    moves = []

    def gather(disk, peg):
      if disk == 0:
        return
      if pos[disk] == peg:
        gather(disk - 1, peg)
        return
      spare = next(p for p in self.PEGS if p not in (pos[disk], peg))
      gather(disk - 1, spare)
      moves.append((pos[disk], peg))
      pos[disk] = peg
      gather(disk - 1, peg)

    gather(3, self.target)
    return moves

  def _settled(self):
    count = 0
    for disk in (3, 2, 1):
      if self.pos[disk] != self.target:
        break
      count += 1
    return count

  def _show(self):
    pegs = {p: [str(d) for d in (3, 2, 1) if self.pos[d] == p] for p in self.PEGS}
    return "Pegs (bottom to top): " + "; ".join(f"{p}: {' '.join(pegs[p]) or '-'}"
                                                 for p in self.PEGS) + "."

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
    text = str(action).strip().upper()
    match = re.fullmatch(r"MOVE\s+([ABC])\s*(?:TO\s+)?([ABC])", text)
    if not match or match.group(1) == match.group(2):
      return self._finish(f"Invalid action {text[:40]!r}. Use: move FROM TO with two different "
                          f"pegs among A, B, C. {self._show()}", 0.0, False)
    src, dst = match.groups()
    top = {p: min([d for d in self.pos if self.pos[d] == p], default=None) for p in self.PEGS}
    if top[src] is None or (top[dst] is not None and top[dst] < top[src]):
      return self._finish(f"Illegal move {src}->{dst}. {self._show()}", 0.0, False)
    self.pos[top[src]] = dst
    self.moves += 1
    settled = self._settled()
    reward = 0.15 * max(0, settled - self.settled) if settled < 3 else 0.0
    self.settled = max(self.settled, settled)
    if settled < 3:
      return self._finish(f"Moved disk {top[src]} to {dst}. {self._show()}", reward, False)
    if self.moves <= self.optimal + 1:
      return self._finish(f"All disks on {self.target} in {self.moves} moves. Solved!", 1.0, True)
    return self._finish(f"All disks on {self.target}, but in {self.moves} moves.",
                        0.7 - self.total, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"move {src} {dst}" for src, dst in self._plan(dict(self.pos))]
