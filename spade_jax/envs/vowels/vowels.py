import random


class VowelEcho:
  """A task with a dense reward: answer with vowels only.

  Each turn's reward is the share of the answer's non-space characters that are vowels
  (a e i o u, any case), divided by max_turns, so the return is in [0, 1] and any answer
  earns partial credit. The seed only changes the wording and the order of the letters.
  """

  max_turns = 2

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.turn = 0
    return self._prompt(), {}

  def step(self, action):
    self.turn += 1
    chars = [c for c in str(action).lower() if not c.isspace()]
    share = sum(c in "aeiou" for c in chars) / len(chars) if chars else 0.0
    done = self.turn >= self.max_turns
    obs = "Done." if done else f"Vowel share {share:.2f}. " + self._prompt()
    return obs, share / self.max_turns, done, False, {"share": share}

  def _prompt(self):
    letters = list("aeiou")
    self.rng.shuffle(letters)
    return f"Turn {self.turn + 1}: answer with only these letters: {' '.join(letters)}."
