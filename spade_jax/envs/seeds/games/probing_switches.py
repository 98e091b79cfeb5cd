"""Switches and bulbs: map each switch to the bulb it controls with few experiments."""
import math
import random
import re


class SwitchBoard:
  """`set` flips switches and shows lit bulbs; few experiments before answering pay most."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.n = rng.randint(*((5, 8), (9, 16), (17, 32))[self.difficulty])  # more switches
    self.wiring = rng.sample(range(1, self.n + 1), self.n)  # switch i -> bulb wiring[i-1]
    self.budget = math.ceil(math.log2(self.n))
    self.tests = 0
    self.turn, self.total, self.done = 0, 0.0, False
    obs = (f"{self.n} switches each control a different one of {self.n} bulbs (both numbered 1 "
           f"to {self.n}). Action 'set BITS' sets all switches at once (a string of {self.n} "
           f"0/1 characters, switch 1 first) and shows which bulbs light up. Action 'answer B1 "
           f"B2 ...' gives the bulb of each switch in order and ends the game. Answering "
           f"correctly after at most {self.budget} experiments earns full marks. "
           f"{self.max_turns} actions.")
    return obs, {"switches": self.n}

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
    setting = re.fullmatch(r"set\s+([01]+)", text)
    answer = re.fullmatch(r"answer\s+([\d\s,]+)", text)
    if setting and len(setting.group(1)) == self.n:
      self.tests += 1
      lit = sorted(self.wiring[i] for i, bit in enumerate(setting.group(1)) if bit == "1")
      shown = " ".join(map(str, lit)) or "none"
      return self._finish(f"Experiment {self.tests}: lit bulbs: {shown}.", 0.0, False)
    bulbs = [int(v) for v in re.findall(r"\d+", answer.group(1))] if answer else []
    if len(bulbs) != self.n:
      return self._finish(f"Could not parse {text[:40]!r}. Use: set followed by {self.n} "
                          f"digits 0/1, or answer followed by {self.n} bulb numbers.", 0.0, False)
    right = sum(b == w for b, w in zip(bulbs, self.wiring, strict=True))
    if right < self.n:
      return self._finish(f"{right} of {self.n} switches right.", 0.3 * right / self.n, True)
    reward = 1.0 if self.tests <= self.budget else 0.6
    return self._finish(f"All correct after {self.tests} experiments.", reward, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return ["answer " + " ".join(map(str, self.wiring))]
