"""Water jugs: measure an exact amount with two unmarked jugs."""
import collections
import random
import re


class WaterJugs:
  """Fill, empty and pour until one jug holds the target; fewer moves score more."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      more = 4 * self.difficulty  # larger jugs and longer plans at level 1
      self.cap = {"A": rng.randint(3, 9 + more), "B": rng.randint(4, 13 + more)}
      self.target = rng.randint(1, max(self.cap.values()) - 1)
      plan = self._plan()
      self.optimal = None if plan is None else len(plan)
      fits = self.optimal is not None and 3 + self.difficulty <= self.optimal <= 6
      if self.cap["A"] != self.cap["B"] and fits:
        break
    self.water = {"A": 0, "B": 0}
    self.turn, self.moves, self.total, self.done = 0, 0, 0.0, False
    obs = (f"You have jug A (holds {self.cap['A']} litres) and jug B (holds {self.cap['B']} "
           f"litres), both empty, and a tap. Get exactly {self.target} litres in either jug. "
           f"Actions: fill A | empty A | pour A B (pour A into B until A is empty or B is full); "
           f"the same with B. Fewer moves score more; {self.max_turns} actions.")
    return obs, {"capacities": dict(self.cap), "target": self.target}

  def _moves(self, state):
    a, b = state
    ca, cb = self.cap["A"], self.cap["B"]
    ab, ba = min(a, cb - b), min(b, ca - a)
    return [(ca, b), (a, cb), (0, b), (a, 0), (a - ab, b + ab), (a + ba, b - ba)]

  def _plan(self):
    """The shortest action list that measures the target (breadth-first), None if none."""
    names = ["fill A", "fill B", "empty A", "empty B", "pour A B", "pour B A"]  # as _moves
    parent = {(0, 0): None}
    queue = collections.deque([(0, 0)])
    while queue:
      state = queue.popleft()
      if self.target in state:
        plan = []
        while parent[state] is not None:
          state, name = parent[state]
          plan.append(name)
        return plan[::-1]
      for name, nxt in zip(names, self._moves(state), strict=True):
        if nxt not in parent:
          parent[nxt] = (state, name)
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
    match = re.fullmatch(r"(fill|empty)\s+([ab])|pour\s+([ab])\s+(?:into\s+)?([ab])", text)
    if not match or (match.group(3) and match.group(3) == match.group(4)):
      return self._finish(f"Unknown action {text[:40]!r}. Use fill A, empty B, pour A B, ... "
                          f"Jugs: A={self.water['A']}, B={self.water['B']}.", 0.0, False)
    if match.group(1) == "fill":
      self.water[match.group(2).upper()] = self.cap[match.group(2).upper()]
    elif match.group(1) == "empty":
      self.water[match.group(2).upper()] = 0
    else:
      src, dst = match.group(3).upper(), match.group(4).upper()
      amount = min(self.water[src], self.cap[dst] - self.water[dst])
      self.water[src] -= amount
      self.water[dst] += amount
    self.moves += 1
    state = f"Jugs: A={self.water['A']}, B={self.water['B']}."
    if self.target not in self.water.values():
      return self._finish(state, 0.0, False)
    extra = self.moves - self.optimal
    reward = 1.0 if extra <= 1 else 0.7 if extra <= 3 else 0.4
    return self._finish(f"{state} You measured {self.target} litres in {self.moves} moves.",
                        reward, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return self._plan()
