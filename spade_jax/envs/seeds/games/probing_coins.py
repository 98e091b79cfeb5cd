"""Counterfeit coin: find the one odd coin with a balance scale."""
import math
import random
import re


class CounterfeitCoin:
  """Weighings compare two groups; using no more weighings than needed earns full marks."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.count = rng.randint(*((14, 27), (28, 81), (82, 243))[self.difficulty])  # more coins
    self.fake = rng.randint(1, self.count)
    self.heavy = rng.random() < 0.5
    self.budget = math.ceil(math.log(self.count, 3) - 1e-9)
    self.weighings = 0
    self.turn, self.total, self.done = 0, 0.0, False
    kind = "heavier" if self.heavy else "lighter"
    obs = (f"Coins are numbered 1 to {self.count}. Exactly one is counterfeit and {kind} than "
           f"the others. Action 'weigh 1 2 3 vs 4 5 6' compares two groups on a balance; "
           f"'answer K' names the counterfeit and ends the game. Finding it with at most "
           f"{self.budget} weighings earns full marks. {self.max_turns} actions.")
    return obs, {"coins": self.count}

  def _weight(self, coins):
    return sum(10 + ((1 if self.heavy else -1) if c == self.fake else 0) for c in coins)

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
    weigh = re.fullmatch(r"weigh\s+([\d\s,]+?)\s*(?:vs\.?|versus|\|)\s*([\d\s,]+)", text)
    answer = re.fullmatch(r"answer\s+(\d{1,3})", text)
    if answer:
      guess = int(answer.group(1))
      if guess != self.fake:
        return self._finish(f"Wrong: coin {self.fake} was counterfeit.", 0.0, True)
      extra = self.weighings - self.budget
      reward = 1.0 if extra <= 0 else 0.6 if extra == 1 else 0.3
      return self._finish(f"Correct, coin {guess}, after {self.weighings} weighings.", reward,
                          True)
    left = [int(v) for v in re.findall(r"\d+", weigh.group(1))] if weigh else []
    right = [int(v) for v in re.findall(r"\d+", weigh.group(2))] if weigh else []
    coins = left + right
    if (not left or not right or len(set(coins)) != len(coins)
        or not all(1 <= c <= self.count for c in coins)):
      return self._finish(f"Could not parse {text[:40]!r}. Use: weigh A B ... vs C D ... "
                          f"(distinct coins from 1 to {self.count}) or answer K.", 0.0, False)
    self.weighings += 1
    diff = self._weight(left) - self._weight(right)
    verdict = "balance" if diff == 0 else "left side heavier" if diff > 0 else "right side heavier"
    return self._finish(f"Weighing {self.weighings}: {verdict}.", 0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"answer {self.fake}"]
