"""Cipher oracle: decode a secret message using an encryption oracle."""
import random
import re


class CipherOracle:
  """The oracle encrypts at most two letters per query; each decoded word pays a third."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "piano", "honey",
           "lemon", "night", "quiet", "sugar", "zebra", "wheat", "frost", "grape", "jolly",
           "knife", "vivid", "pearl", "ruby", "wolf", "mango", "cable", "drift", "ember",
           "fable", "glove", "hazel", "index", "juice", "koala", "lunar", "noble", "orbit"]

  def reset(self, seed=None):
    rng = random.Random(seed)
    self.a = rng.choice([3, 5, 7, 9, 11, 15, 17, 19, 21, 23, 25])
    self.b = rng.randrange(26)
    self.words = rng.sample(self.WORDS, 3)
    self.solved = [False] * 3
    self.turn, self.total, self.done = 0, 0.0, False
    secret = " ".join(self._encrypt(w) for w in self.words)
    self.query = 2 - self.difficulty  # letters the machine takes per query (fewer: harder)
    self.usage = ("encrypt XY", "one or two letters") if self.query == 2 else (
        "encrypt X", "one letter")
    usage = f"{self.usage[0]} (encrypts {self.usage[1]})"
    obs = (f"An intercepted message of three words: {secret.upper()}. You may use the enemy's "
           f"encryption machine. Actions: {usage} | answer N "
           f"WORD (your decoding of word N = 1, 2 or 3). Each correct word scores a third; wrong "
           f"answers may be retried. {self.max_turns} actions.")
    return obs, {}

  def _encrypt(self, word):
    return "".join(chr(97 + (self.a * (ord(ch) - 97) + self.b) % 26) for ch in word)

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
    enc = re.fullmatch(rf"encrypt\s+([a-z]{{1,{self.query}}})", text)
    ans = re.fullmatch(r"answer\s+([1-3])\s+([a-z]+)", text)
    if enc:
      return self._finish(f"{enc.group(1)} -> {self._encrypt(enc.group(1)).upper()}", 0.0, False)
    if not ans:
      return self._finish(f"Could not parse {text[:40]!r}. Use: {self.usage[0]} "
                          f"({self.usage[1]}) or answer N WORD.", 0.0, False)
    index, word = int(ans.group(1)) - 1, ans.group(2)
    if self.solved[index]:
      return self._finish(f"Word {index + 1} is already decoded.", 0.0, False)
    if word != self.words[index]:
      return self._finish(f"Word {index + 1} is not {word!r}.", 0.0, False)
    self.solved[index] = True
    done = all(self.solved)
    return self._finish(f"Word {index + 1} is {word}. " + ("Message decoded!" if done else ""),
                        1 / 3, done)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return [f"answer {i + 1} {word}" for i, word in enumerate(self.words)]
