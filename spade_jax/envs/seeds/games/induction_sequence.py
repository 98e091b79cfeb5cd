"""Sequence extrapolation: predict the next terms of a recursively generated sequence."""
import random
import re


class NextTerm:
  """Predict four terms one at a time; each correct prediction pays a quarter."""

  max_turns = 6
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  ROUNDS = 4

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      steeper = [s * (3 + k) for k in range(1, self.difficulty + 1) for s in (-1, 1)]
      ratios = [-3, -2, 2, 3] + steeper
      p, q = rng.choice(ratios), rng.randint(-6, 6)  # steeper growth at higher levels
      terms = [rng.randint(-5, 9)]
      for _ in range(2 + self.ROUNDS):
        terms.append(p * terms[-1] + q)
      bound = 5000 * 20 ** self.difficulty
      if len(set(terms)) == len(terms) and max(abs(t) for t in terms) < bound:
        break
    self.terms, self.shown = terms, 3
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"A sequence begins: {self._show()}. Predict the next term. Action format: predict "
           f"VALUE. After each prediction the true term is revealed; {self.ROUNDS} terms to "
           f"predict, {self.max_turns} actions.")
    return obs, {}

  def _show(self):
    return ", ".join(map(str, self.terms[:self.shown]))

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
    match = re.fullmatch(r"(?:predict\s+)?(-?\d{1,7})", text)
    if not match:
      return self._finish(f"Could not parse {text[:40]!r}. Use: predict VALUE (an integer). "
                          f"Sequence so far: {self._show()}.", 0.0, False)
    truth = self.terms[self.shown]
    right = int(match.group(1)) == truth
    self.shown += 1
    verdict = "Correct" if right else f"Wrong, it was {truth}"
    over = self.shown == len(self.terms)
    tail = "Done." if over else "Predict the next term."
    return self._finish(f"{verdict}. Sequence so far: {self._show()}. {tail}",
                        1 / self.ROUNDS if right else 0.0, over)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"predict {term}" for term in self.terms[self.shown:]]
