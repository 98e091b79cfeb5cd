"""The lying thief: interview suspects, work out who lies, accuse the thief."""
import random
import re


class LyingThief:
  """One suspect stole the jewels. Each statement is revealed only when asked."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"]
  ACCUSE_REWARDS = (1.0, 0.4, 0.2)

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.suspects = rng.sample(self.NAMES, rng.choice([4, 5]) + self.difficulty)
    while True:
      self.thief = rng.choice(self.suspects)
      self.statements = {s: self._random_statement(rng, s) for s in self.suspects}
      if [x for x in self.suspects if self._consistent(x)] == [self.thief]:
        break
    self.turn, self.total, self.accusations, self.done = 0, 0.0, 0, False
    obs = (f"The jewels were stolen by exactly one of: {', '.join(self.suspects)}. Each suspect "
           f"makes one statement when interviewed; statements are not necessarily true. You have "
           f"{self.max_turns} actions and at most 3 accusations. Actions: ask NAME | accuse NAME.")
    return obs, {"suspects": self.suspects}

  def _random_statement(self, rng, speaker):
    others = [s for s in self.suspects if s != speaker]
    kind = rng.choice(["innocent", "thief", "either", "self"])
    if kind == "either":
      return ("either", *rng.sample(others, 2))
    return (kind, speaker if kind == "self" else rng.choice(others))

  def _holds(self, statement, thief):
    kind, *names = statement
    if kind == "thief":
      return names[0] == thief
    if kind == "either":
      return thief in names
    return names[0] != thief

  def _consistent(self, thief):
    return all(self._holds(st, thief) == (s != thief) for s, st in self.statements.items())

  def _text(self, statement):
    kind, *names = statement
    if kind == "self":
      return "I am innocent."
    if kind == "innocent":
      return f"{names[0]} is innocent."
    if kind == "thief":
      return f"{names[0]} is the thief."
    return f"The thief is {names[0]} or {names[1]}."

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
    text = str(action).strip()
    match = re.fullmatch(r"(ask|accuse)\s+([A-Za-z]+)\.?", text, re.IGNORECASE)
    name = match.group(2).capitalize() if match else None
    if name not in self.suspects:
      return self._finish(f"Unrecognised action {text[:40]!r}. Use 'ask NAME' or 'accuse NAME' "
                          f"with NAME one of {', '.join(self.suspects)}.", 0.0, False)
    if match.group(1).lower() == "ask":
      return self._finish(f"{name} says: \"{self._text(self.statements[name])}\"", 0.0, False)
    self.accusations += 1
    if name == self.thief:
      reward = self.ACCUSE_REWARDS[self.accusations - 1]
      return self._finish(f"Correct: {name} is the thief.", reward, True)
    if self.accusations >= len(self.ACCUSE_REWARDS):
      return self._finish(f"Wrong again: the thief was {self.thief}.", 0.0, True)
    return self._finish(f"{name} is innocent. You may accuse again.", 0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"accuse {self.thief}"]
