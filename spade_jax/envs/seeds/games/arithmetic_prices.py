"""Price discovery: learn hidden item prices from the totals of purchases."""
import random
import re


class PriceDiscovery:
  """`buy` reveals the total of a basket; fewer baskets before answering score more."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  ITEMS = ["apple", "bread", "cheese", "dates", "eggs", "figs", "grapes", "honey", "jam"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.items = rng.sample(self.ITEMS, rng.choice([3, 4][self.difficulty:]))  # more items
    self.prices = [rng.randint(1, 99) for _ in self.items]
    self.baskets = 0
    self.turn, self.total, self.done = 0, 0.0, False
    names = ", ".join(self.items)
    obs = (f"A shop sells {names}; each price is a whole number of coins from 1 to 99. "
           f"Action 'buy Q1 Q2 ...' buys the given quantities ({len(self.items)} whole numbers "
           f"from 0 to 1000000, in the order {names}) and tells you the total. Action "
           f"'answer P1 P2 ...' names every price in the same order and ends the game. One "
           f"basket earns full marks; each extra basket earns less. {self.max_turns} actions.")
    return obs, {"items": self.items}

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
    match = re.fullmatch(r"(buy|answer)\s+([\d\s,]+)", text)
    values = [int(v) for v in re.findall(r"\d+", match.group(2))] if match else []
    if len(values) != len(self.items) or any(v > 1000000 for v in values):
      return self._finish(f"Could not parse {text[:40]!r}. Use: buy Q1 ... Q{len(self.items)} or "
                          f"answer P1 ... P{len(self.items)} (whole numbers, quantities at most "
                          "1000000).", 0.0, False)
    if match.group(1) == "buy":
      self.baskets += 1
      cost = sum(q * p for q, p in zip(values, self.prices, strict=True))
      return self._finish(f"That basket costs {cost} coins.", 0.0, False)
    right = sum(v == p for v, p in zip(values, self.prices, strict=True))
    truth = " ".join(map(str, self.prices))
    if right < len(self.items):
      return self._finish(f"{right} of {len(self.items)} prices right; they were {truth}.",
                          0.1 * right, True)
    reward = {0: 0.3, 1: 1.0, 2: 0.7, 3: 0.5}.get(self.baskets, 0.3)
    return self._finish(f"All prices right after {self.baskets} baskets.", reward, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    one_basket = " ".join(str(100 ** i) for i in range(len(self.items)))
    return [f"buy {one_basket}", "answer " + " ".join(map(str, self.prices))]
