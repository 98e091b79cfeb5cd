"""Clue: find the hidden suspect, weapon and room by making suggestions."""
import random
import re


class ClueMystery:
  """Suggestions are refuted by opponents who show one matching card."""

  max_turns = 8
  difficulty_levels = 2  # reset scales with self.difficulty (0 = easiest)
  difficulty = 0
  CATEGORIES = {
      "suspect": ["Plum", "Scarlet", "Mustard", "Peacock", "Green", "White"],
      "weapon": ["rope", "knife", "candlestick", "wrench", "pipe", "revolver"],
      "room": ["kitchen", "library", "study", "hall", "lounge", "cellar"],
  }

  def reset(self, seed=None):
    rng = random.Random(seed)
    sizes = {"suspect": 4 + self.difficulty, "weapon": 4, "room": 4}  # more suspects
    self.cards = {cat: rng.sample(names, sizes[cat]) for cat, names in self.CATEGORIES.items()}
    self.answer = {cat: rng.choice(names) for cat, names in self.cards.items()}
    self.hand = [rng.choice([n for n in names if n != self.answer[cat]])
                 for cat, names in self.cards.items()]
    rest = [n for names in self.cards.values() for n in names
            if n not in self.hand and n not in self.answer.values()]
    rng.shuffle(rest)
    self.opponents = {"North": rest[:len(rest) // 2], "East": rest[len(rest) // 2:]}
    north, east = (len(held) for held in self.opponents.values())
    holdings = f"{north} cards each" if north == east else f"{north} and {east} cards"
    self.rng = rng
    self.turn, self.total, self.done = 0, 0.0, False
    lines = [f"  {cat}s: {', '.join(names)}" for cat, names in self.cards.items()]
    obs = ("A murder mystery. One suspect, one weapon and one room are hidden in the envelope; "
           "every other card is held by a player.\n" + "\n".join(lines) +
           f"\nYour cards: {', '.join(self.hand)}. Opponents North and East hold {holdings}. "
           "When you suggest, the first opponent (North, then East) holding any named card shows "
           "you one of them. Actions: suggest SUSPECT WEAPON ROOM | accuse SUSPECT WEAPON ROOM. "
           f"One accusation ends the game; {self.max_turns} actions in all.")
    return obs, {"hand": list(self.hand)}

  def _parse(self, words):
    chosen = {}
    for word in words:
      for cat, names in self.cards.items():
        for name in names:
          if word.lower() == name.lower():
            chosen[cat] = name
    return chosen if len(chosen) == 3 and len(words) == 3 else None

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
    verb = words[0].lower() if words else ""
    chosen = self._parse(words[1:]) if verb in ("suggest", "accuse") else None
    if chosen is None:
      return self._finish(f"Could not parse {text[:40]!r}. Use: suggest SUSPECT WEAPON ROOM or "
                          "accuse SUSPECT WEAPON ROOM, one name from each list.", 0.0, False)
    named = [chosen[cat] for cat in self.cards]
    if verb == "accuse":
      right = sum(chosen[cat] == self.answer[cat] for cat in self.cards)
      truth = " ".join(self.answer[cat] for cat in self.cards)
      if right == 3:
        return self._finish(f"Correct! It was {truth}.", 1.0, True)
      return self._finish(f"Wrong ({right} of 3 right). It was {truth}.", 0.15 * right, True)
    for player, held in self.opponents.items():
      matching = [n for n in named if n in held]
      if matching:
        return self._finish(f"{player} shows you: {self.rng.choice(matching)}.", 0.0, False)
    return self._finish("Nobody can refute your suggestion.", 0.0, False)

  def oracle_actions(self):
    """The actions that solve this instance, computed from the hidden state."""
    return ["accuse " + " ".join(self.answer[cat] for cat in self.cards)]
