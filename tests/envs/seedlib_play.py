"""In-process play of the trusted seed sources, shared by the tests in tests/envs.

The sources are exec'd in this process (fast, no sandbox): acceptable only because they
are the hand-written seed library, never generated code.
"""

import functools

from spade_jax.envs import library
from spade_jax.selfplay.replies import parse_reply


@functools.cache
def seeds_by_name() -> dict:
  return {seed.name: seed for seed in library.load_seed_library()}


@functools.cache
def env_class(name: str) -> type:
  seed = seeds_by_name()[name]
  namespace = {"__name__": f"seed_{name}"}
  exec(compile(seed.source, f"<seed {name}>", "exec"), namespace)  # noqa: S102 (trusted)
  classes = [v for v in namespace.values()
             if isinstance(v, type) and v.__module__ == namespace["__name__"]]
  assert len(classes) == 1, name
  return classes[0]


class Episode:
  """One episode of a seed; `act` steps it and keeps the return and the turn count."""

  def __init__(self, name: str, seed: int, level: int = 0):
    self.env = env_class(name)()
    if level:
      self.env.difficulty = level  # what envs.difficulty.at_level pins on the class
    self.obs, self.info = self.env.reset(seed)
    self.total, self.turns, self.done = 0.0, 0, False
    self.terminated = False
    self.trace = [self.obs]  # every observation, to compare episodes across seeds

  def say(self, reply: str) -> list[str]:
    """Plays a raw model reply through the reply parser: one step per part, in order."""
    observations = []
    for part in parse_reply(reply, tools=getattr(self.env, "tools", None)).parts:
      assert part.kind != "error", part.error
      observations.append(self.act(part.action))
    return observations

  def act(self, action: str | dict) -> str:
    assert not self.done, f"acted after the episode ended: {action!r}"
    self.obs, reward, terminated, truncated, _ = self.env.step(action)
    assert isinstance(reward, float) and 0.0 <= reward <= 1.0, reward
    self.total += reward
    self.turns += 1
    self.terminated = terminated
    self.done = terminated or truncated
    self.trace.append(self.obs)
    return self.obs


GAME_SEEDS = (0, 1, 2, 3, 7, 11, 42, 1234)


def levels(name: str) -> range:
  """The seed's difficulty levels (range(1) when it declares none)."""
  return range(getattr(env_class(name), "difficulty_levels", 1))


def check_solver_wins(name: str, solver, seeds=GAME_SEEDS, level: int = 0) -> None:
  """`solver(episode)` must end every seed's episode with a full return, seeds differing."""
  traces = set()
  for seed in seeds:
    ep = Episode(name, seed, level)
    solver(ep)
    assert ep.terminated, (name, seed, ep.obs)
    assert 0.99 <= ep.total <= 1.0 + 1e-9, (name, seed, ep.total, ep.obs)
    traces.add(tuple(ep.trace))
  assert len(traces) == len(seeds), f"{name}: different seeds gave the same episode"
