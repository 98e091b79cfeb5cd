"""Scripted solvers for the deduction, planning and spatial seeds.

Each solver reads only the observations and follows the strategy in the seed's hint;
reaching the full return on several seeds shows the hint makes the game solvable.
"""

import collections
import itertools
import re

import pytest

from tests.envs.seedlib_play import check_solver_wins, levels


def mastermind(ep):
  symbols = int(re.search(r"from 1 to (\d)", ep.obs).group(1))

  def score(guess, code):
    exact = sum(g == c for g, c in zip(guess, code, strict=True))
    return exact, sum(min(guess.count(d), code.count(d)) for d in set(guess)) - exact

  candidates = list(itertools.product(range(1, symbols + 1), repeat=3))
  guess = (1, 1, 2)
  while not ep.done:
    obs = ep.act("guess " + " ".join(map(str, guess)))
    feedback = tuple(int(v) for v in re.search(r"exact (\d), misplaced (\d)", obs).groups())
    candidates = [c for c in candidates if score(guess, c) == feedback]
    guess = candidates[0]


def liar(ep):
  suspects = re.search(r"one of: (.*?)\. Each", ep.obs).group(1).split(", ")
  said = {s: re.search(r'says: "(.*)"', ep.act(f"ask {s}")).group(1) for s in suspects}

  def holds(speaker, text, thief):
    if text == "I am innocent.":
      return speaker != thief
    if m := re.fullmatch(r"(\w+) is innocent\.", text):
      return m.group(1) != thief
    if m := re.fullmatch(r"(\w+) is the thief\.", text):
      return m.group(1) == thief
    return thief in re.fullmatch(r"The thief is (\w+) or (\w+)\.", text).groups()

  [thief] = [x for x in suspects if all(holds(s, t, x) == (s != x) for s, t in said.items())]
  ep.act(f"accuse {thief}")


def minisudoku(ep):
  grid = [[int(v) if v != "." else 0 for v in line.split()]
          for line in ep.obs.splitlines() if re.fullmatch(r"[\d.]( [\d.]){3}", line)]
  while not ep.done:
    for r, c in itertools.product(range(4), range(4)):
      box = {grid[i][j] for i in range(r // 2 * 2, r // 2 * 2 + 2)
             for j in range(c // 2 * 2, c // 2 * 2 + 2)}
      options = set(range(1, 5)) - set(grid[r]) - {grid[i][c] for i in range(4)} - box
      if grid[r][c] == 0 and len(options) == 1:
        grid[r][c] = options.pop()
        ep.act(f"set {r + 1} {c + 1} {grid[r][c]}")
        break


def clue(ep):
  cards = {m.group(1): m.group(2).split(", ") for m in re.finditer(r"  (\w+)s: (.*)", ep.obs)}
  hand = re.search(r"Your cards: (.*?)\. ", ep.obs).group(1).split(", ")
  own = {cat: next(c for c in names if c in hand) for cat, names in cards.items()}
  answer = {}
  for cat, names in cards.items():
    unknown = [c for c in names if c not in hand]
    while len(unknown) > 1:
      test = dict(own, **{cat: unknown[0]})
      obs = ep.act("suggest " + " ".join(test[c] for c in cards))
      if obs.startswith("Nobody"):
        unknown = unknown[:1]
      else:
        unknown.remove(re.search(r"shows you: (\w+)", obs).group(1))
    answer[cat] = unknown[0]
  ep.act("accuse " + " ".join(answer[c] for c in cards))


def bridge(ep):
  times = {n: int(t) for n, t in re.findall(r"(\w+) \((\d+) min\)", ep.obs)}
  a, b, c, d = sorted(times, key=times.get)
  for move in (f"{a} {b}", a, f"{c} {d}", b, f"{a} {b}"):
    ep.act(f"cross {move}")


def jugs(ep):
  cap = {k: int(v) for k, v in re.findall(r"jug (\w) \(holds (\d+) litres\)", ep.obs)}
  target = int(re.search(r"exactly (\d+) litres", ep.obs).group(1))

  def cycle(src, dst):
    water, moves = {"A": 0, "B": 0}, []
    while target not in water.values():
      if water[src] == 0:
        water[src], move = cap[src], f"fill {src}"
      elif water[dst] == cap[dst]:
        water[dst], move = 0, f"empty {dst}"
      else:
        amount = min(water[src], cap[dst] - water[dst])
        water[src], water[dst], move = water[src] - amount, water[dst] + amount, f"pour {src} {dst}"
      moves.append(move)
    return moves

  for move in min(cycle("A", "B"), cycle("B", "A"), key=len):
    ep.act(move)


def hanoi(ep):
  target = re.search(r"onto peg (\w)", ep.obs).group(1)
  pos = {int(d): peg for peg, disks in re.findall(r"(\w): ([\d ]+|-)", ep.obs.split("Pegs")[1])
         for d in disks.split() if d != "-"}

  def gather(disk, peg):
    if disk == 0:
      return
    if pos[disk] != peg:
      spare = ({"A", "B", "C"} - {pos[disk], peg}).pop()
      gather(disk - 1, spare)
      ep.act(f"move {pos[disk]} {peg}")
      pos[disk] = peg
    gather(disk - 1, peg)

  gather(3, target)


def pancakes(ep):
  stack = [int(v) for v in re.search(r"top to bottom\): ([\d ]+)\.", ep.obs).group(1).split()]
  for size in range(len(stack), 1, -1):
    where = stack.index(size)
    if where == size - 1:
      continue
    for k in ([where + 1] if where else []) + [size]:
      ep.act(f"flip {k}")
      stack[:k] = stack[:k][::-1]


def hotcold(ep):
  width = int(re.search(r"in a (\d+) x", ep.obs).group(1))
  d1 = int(re.search(r"reads (\d+)", ep.act("probe 0 0")).group(1))
  d2 = int(re.search(r"reads (\d+)", ep.act(f"probe {width - 1} 0")).group(1))
  x = (d1 - d2 + width - 1) // 2
  ep.act(f"dig {x} {d1 - x}")


def robot(ep):
  goal = tuple(int(v) for v in re.search(r"goal is at \((-?\d+), (-?\d+)\)", ep.obs).groups())
  order = ["north", "east", "south", "west"]
  unit = {"north": (0, 1), "east": (1, 0), "south": (0, -1), "west": (-1, 0)}
  obs = ep.act("move north 1")
  pos = tuple(int(v) for v in re.search(r"Robot at \((-?\d+), (-?\d+)\)", obs).groups())
  rotation = order.index(next(d for d, u in unit.items() if u == pos))
  for axis, (plus, minus) in enumerate((("east", "west"), ("north", "south"))):
    gap = goal[axis] - pos[axis]
    if gap and not ep.done:
      wanted = plus if gap > 0 else minus
      ep.act(f"move {order[(order.index(wanted) - rotation) % 4]} {abs(gap)}")


def dice(ep):
  goal = tuple(int(v) for v in re.search(r"rests on \((-?\d+), (-?\d+)\)", ep.obs).groups())
  goal_top = int(re.search(r"with (\d) on top\.", ep.obs).group(1))
  rolls = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}

  def roll(die, d):
    top, north, east = die
    return {"north": (7 - north, top, east), "south": (north, 7 - top, east),
            "east": (7 - east, north, top), "west": (east, north, 7 - top)}[d]

  start = ((0, 0), (1, 2, 3))
  paths, queue = {start: []}, collections.deque([start])
  while queue:
    pos, die = state = queue.popleft()
    if pos == goal and die[0] == goal_top:
      break
    for d, (dx, dy) in rolls.items():
      nxt = ((pos[0] + dx, pos[1] + dy), roll(die, d))
      if nxt not in paths:
        paths[nxt] = paths[state] + [d]
        queue.append(nxt)
  for d in paths[state]:
    ep.act(f"roll {d}")


def ice(ep):
  rows = [line for line in ep.obs.splitlines() if re.fullmatch(r"[.#PG]{7}", line)]
  find = lambda ch: next((r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v == ch)
  start, goal = find("P"), find("G")
  moves = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

  def slide(pos, d):
    r, c = pos
    while 0 <= r + moves[d][0] < 7 and 0 <= c + moves[d][1] < 7 and \
        rows[r + moves[d][0]][c + moves[d][1]] != "#":
      r, c = r + moves[d][0], c + moves[d][1]
    return r, c

  paths, queue = {start: []}, collections.deque([start])
  while goal not in paths:
    pos = queue.popleft()
    for d in moves:
      if slide(pos, d) not in paths:
        paths[slide(pos, d)] = paths[pos] + [d]
        queue.append(slide(pos, d))
  for d in paths[goal]:
    ep.act(f"move {d}")


SOLVERS = {"mastermind": mastermind, "liar": liar, "minisudoku": minisudoku, "clue": clue,
           "bridge": bridge, "jugs": jugs, "hanoi": hanoi, "pancakes": pancakes,
           "hotcold": hotcold, "robot": robot, "dice": dice, "ice": ice}


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_hint_strategy_reaches_full_return_on_varied_episodes(name):
  for level in levels(name):  # every difficulty level the seed declares
    check_solver_wins(name, SOLVERS[name], level=level)
