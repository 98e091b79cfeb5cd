"""Held-out games played with and without their hint: the closest in-domain check of the
agent. `HeldoutGames` is any such suite (its `games()` and reset seeds); `SeedGamesHeldout`
is the seed library's.

Data: the seed library's held-out split (`envs.library.HELDOUT_GAMES`, one game per skill
category), which training leaves out of the memory and the replays when
config.eval.hold_out_seed_games is on. Items are (game, reset seed) for `reset_seeds`; ids
"<game>/<seed>". `play` runs the agent exactly as self-play does (selfplay.episodes:
same prompts, action format, turn rules) in the sandbox pool, `samples` episodes per arm.
A response is one episode: {"arm": "no_hint" | "hint", "replies": [assistant texts]}
(plus "dropped": true when the sandbox failed while playing it: its item is unscored).
Scoring replays the replies against a fresh reset with the same seed (environments are
deterministic per seed, the contract requires it), so `score` on a predictions file and
`run` score the same way. Metric: mean no-hint return; `extra` has the hinted return and
the gap (hint - no hint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from spade_jax.envs.library import load_seed_library
from spade_jax.eval import stats
from spade_jax.eval.suite import Item, ItemRecord, Sampling, Suite
from spade_jax.selfplay.episodes import EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.replies import parse_game_reply
from spade_jax.selfplay.timing import Timings

RESET_SEEDS = (1000, 1001, 1002, 1003)
ACTION_FORMAT = "<action>{}</action>"
ARMS = ("no_hint", "hint")
MAX_TURNS = 32  # the environments' own max_turns end them earlier


class Game(Protocol):
  source: str
  hint: str


class HeldoutGames(Suite):
  """Games by name (`games()`), each played from every reset seed in both arms."""

  metric = "return"
  sampling = Sampling(max_new_tokens=1024, temperature=1.0, top_p=1.0)
  needs_pool = True
  reset_seeds: tuple[int, ...] = RESET_SEEDS

  def games(self) -> Mapping[str, Game]:
    raise NotImplementedError

  def items(self, limit: int | None = None) -> list[Item]:
    out = [Item(f"{name}/{seed}", (), {"game": name, "seed": seed})
           for seed in self.reset_seeds for name in self.games()]
    return out[:limit]

  def check_prediction(self, item: Item, value) -> list:
    ok = isinstance(value, list) and value and all(
        isinstance(v, dict) and v.get("arm") in ARMS and isinstance(v.get("replies"), list)
        and all(isinstance(r, str) for r in v["replies"]) for v in value)
    if not ok:
      raise ValueError(f"item {item.id!r}: 'responses' must be a non-empty list of "
                       "{'arm': 'no_hint' | 'hint', 'replies': [str, ...]}")
    return value

  def play(self, items, generator, samples, pool=None) -> list[list[dict]]:
    games = self.games()
    specs = []
    for i, item in enumerate(items):
      game = games[item.reference["game"]]
      for arm in ARMS:
        for j in range(samples):
          specs.append(EpisodeSpec((i, arm, j), item.reference["game"], arm, game.source,
                                   game.hint if arm == "hint" else None,
                                   item.reference["seed"],
                                   generator.params.seed + 7919 * len(specs), MAX_TURNS))
    settings = EpisodeSettings(ACTION_FORMAT, generator.params,
                               generator.max_cache_len - generator.params.max_new_tokens)
    episodes = play_episodes(generator.engine, pool, generator.formatter, specs, settings,
                             Timings())
    out: list[list[dict]] = [[] for _ in items]
    for ep in episodes:
      replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
      entry = {"arm": ep.spec.arm, "replies": replies}
      if ep.dropped:  # a sandbox failure while playing: never scored
        entry["dropped"] = True
      out[ep.spec.key[0]].append(entry)
    return out

  def score(self, items: Sequence[Item], responses, pool=None) -> list[ItemRecord]:
    games = self.games()
    episodes = [(i, k, ep) for i, eps in enumerate(responses) for k, ep in enumerate(eps)]
    returns = replay(pool, [(games[items[i].reference["game"]].source,
                             items[i].reference["seed"], ep["replies"]) for i, _, ep in episodes])
    returns = [None if ep.get("dropped") else r for r, (_, _, ep) in
               zip(returns, episodes, strict=True)]
    records = []
    for i, item in enumerate(items):
      scores = [returns[n] for n, (j, _, _) in enumerate(episodes) if j == i]
      arms = [ep["arm"] for ep in responses[i]]
      record = ItemRecord(item.id, item.reference, list(responses[i]),
                          [[game_action(r) for r in ep["replies"]]
                           for ep in responses[i]], scores, None, item.reference, arms)
      if None not in scores:
        record.score = arm_mean(record, "no_hint")
      records.append(record)
    return records

  def summarize(self, records: Sequence[ItemRecord]) -> stats.Summary:
    summary = super().summarize(records)
    hinted = [arm_mean(r, "hint") for r in records if r.score is not None]
    hinted = [h for h in hinted if h is not None]
    if hinted:
      summary.extra["return_with_hint"] = stats.mean_stderr(hinted)[0]
      summary.extra["hint_gap"] = summary.extra["return_with_hint"] - summary.value
    return summary


class SeedGamesHeldout(HeldoutGames):
  name = "seed_games_heldout"

  def games(self) -> dict[str, Game]:
    return {g.name: g for g in load_seed_library(kind="games", split="heldout")}


def arm_scores(record: ItemRecord, arm: str) -> list[float | None]:
  """The returns of a record's episodes in `arm` (None: unscored)."""
  return [s for s, a in zip(record.scores, record.details, strict=True) if a == arm]


def arm_mean(record: ItemRecord, arm: str) -> float | None:
  """The mean return of a record's episodes in `arm`; None if one is unscored or none ran."""
  values = arm_scores(record, arm)
  return sum(values) / len(values) if values and None not in values else None


def game_action(reply: str) -> str | None:
  """The action self-play sends for this reply (None: it answers with MISSING_ACTION)."""
  part = parse_game_reply(reply, ACTION_FORMAT).parts[0]
  return part.action if part.kind == "text" else None


def replay(pool, episodes: Sequence[tuple[str, int, Sequence[str]]]) -> list[float | None]:
  """Each (source, seed, replies) episode's return; None when the sandbox failed (infra).

  Replies without an action are skipped (self-play answers them without stepping).
  """
  actions = [[a for a in (game_action(r) for r in replies) if a is not None]
             for _, _, replies in episodes]
  keys = [("replay", n) for n in range(len(episodes))]
  returns: list[float | None] = [0.0] * len(episodes)
  live = {}
  for n, record in enumerate(pool.reset([(k, src, seed) for k, (src, seed, _)
                                         in zip(keys, episodes, strict=True)])):
    if record.infra_error:
      returns[n] = None
    elif record.error_kind is None and actions[n]:
      live[n] = 0
  while live:
    batch = list(live)
    records = pool.step([(keys[n], actions[n][live[n]]) for n in batch])
    for n, record in zip(batch, records, strict=True):
      live[n] += 1
      if record.infra_error:
        returns[n] = None
      else:
        returns[n] += float(record.reward)
      if record.done or live[n] >= len(actions[n]):
        del live[n]
  pool.close_episodes(keys)
  return returns
