"""Balance sorting: order four boxes by weight using as few comparisons as possible."""
import random
import re


class WeighSort:
  """`compare` says which of two boxes is heavier; five comparisons always suffice."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  COUNT_WORDS = ("Four", "Five")
  FULL_MARKS = (5, 7)  # the fewest comparisons that always suffice for 4 and 5 boxes

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.n = 4 + self.difficulty  # more boxes at level 1
    self.labels = sorted(rng.sample("ABCDEFGHJKMNPQRSTUVWXYZ", self.n))
    weights = rng.sample(range(1, 100), self.n)
    self.weight = dict(zip(self.labels, weights, strict=True))
    self.order = sorted(self.labels, key=self.weight.get)
    self.compares = 0
    self.turn, self.total, self.done = 0, 0.0, False
    names = " ".join(self.labels)
    count, budget = self.COUNT_WORDS[self.difficulty], self.FULL_MARKS[self.difficulty]
    answer = " ".join("VWXYZ"[-self.n:])
    obs = (f"{count} boxes {names} have different hidden weights. Action 'compare X Y' tells you "
           f"which of two boxes is heavier; 'answer {answer}' lists all {count.lower()} from "
           f"lightest to heaviest and ends the game. A correct order after at most {budget} "
           f"comparisons earns full marks. {self.max_turns} actions.")
    return obs, {"boxes": self.labels}

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
    match = re.fullmatch(r"(COMPARE|ANSWER)\s+([A-Z](?:[\s,<]+[A-Z])*)", text)
    boxes = re.findall(r"[A-Z]", match.group(2)) if match else []
    verb = match.group(1) if match else ""
    wanted = 2 if verb == "COMPARE" else self.n
    if len(boxes) != wanted or len(set(boxes)) != wanted or not set(boxes) <= set(self.labels):
      return self._finish(f"Could not parse {text[:40]!r}. Use: compare X Y or answer "
                          f"{' '.join('VWXYZ'[-self.n:])} "
                          f"with boxes {' '.join(self.labels)}.", 0.0, False)
    if verb == "COMPARE":
      self.compares += 1
      x, y = boxes
      heavier = x if self.weight[x] > self.weight[y] else y
      return self._finish(f"Comparison {self.compares}: {heavier} is heavier.", 0.0, False)
    if boxes == self.order:
      tier = 1.0 if self.compares <= self.FULL_MARKS[self.difficulty] else 0.6
      return self._finish(f"Correct order after {self.compares} comparisons.", tier, True)
    right = sum(b == o for b, o in zip(boxes, self.order, strict=True))
    return self._finish(f"Wrong order ({right} of {self.n} in place).", 0.1 * right, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return ["answer " + " ".join(self.order)]
