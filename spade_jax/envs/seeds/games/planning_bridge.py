"""Bridge and torch: get four people across a bridge at night within a time limit."""
import random
import re


class BridgeTorch:
  """At most two cross at a time, carrying the one torch, at the slower walker's pace."""

  max_turns = 8
  difficulty_levels = 3  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  NAMES = ["Ann", "Bob", "Cat", "Dan", "Eve", "Fox", "Gil", "Ivy", "Jay", "Kim"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    while True:
      times = sorted(rng.sample(range(1, 16 + 15 * self.difficulty), 4))  # larger times
      a, b, c, d = times
      if 2 * b < a + c:
        break
    self.limit = a + 3 * b + d
    self.times = dict(zip(rng.sample(self.NAMES, 4), times, strict=True))
    self.near, self.far = set(self.times), set()
    self.torch_near, self.elapsed = True, 0
    self.turn, self.total, self.done = 0, 0.0, False
    people = ", ".join(f"{n} ({t} min)" for n, t in self.times.items())
    obs = (f"Four people must cross a narrow bridge at night: {people}. At most two cross at "
           f"a time and they must carry the single torch, walking at the slower one's pace; "
           f"someone must bring the torch back. Everyone must be across within {self.limit} "
           f"minutes. Action format: cross NAME [NAME] (the torch carriers, moving from the "
           f"torch's side). {self._state()}")
    return obs, {"limit": self.limit}

  def _state(self):
    side = "near" if self.torch_near else "far"
    return (f"Near side: {', '.join(sorted(self.near)) or '-'}; far side: "
            f"{', '.join(sorted(self.far)) or '-'}; torch on the {side} side; "
            f"{self.elapsed} of {self.limit} minutes used.")

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
    words = re.findall(r"[A-Za-z]+", text)
    names = [w.capitalize() for w in words[1:]]
    here = self.near if self.torch_near else self.far
    if (not words or words[0].lower() != "cross" or not 1 <= len(names) <= 2
        or len(set(names)) != len(names) or not all(n in here for n in names)):
      return self._finish(f"Invalid move {text[:40]!r}. Use: cross NAME or cross NAME NAME, "
                          f"naming people on the torch's side. {self._state()}", 0.0, False)
    there = self.far if self.torch_near else self.near
    here.difference_update(names)
    there.update(names)
    self.torch_near = not self.torch_near
    self.elapsed += max(self.times[n] for n in names)
    if self.near:
      return self._finish(f"{' and '.join(names)} crossed. {self._state()}", 0.0, False)
    if self.elapsed <= self.limit:
      return self._finish(f"Everyone crossed in {self.elapsed} minutes. Perfect!", 1.0, True)
    reward = 0.5 if self.elapsed <= self.limit + 3 else 0.25
    return self._finish(f"Everyone crossed, but it took {self.elapsed} minutes (limit "
                        f"{self.limit}).", reward, True)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    a, b, c, d = sorted(self.times, key=self.times.get)  # fastest first
    return [f"cross {a} {b}", f"cross {a}", f"cross {c} {d}", f"cross {b}", f"cross {a} {b}"]
