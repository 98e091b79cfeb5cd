"""Plays an environment with scripted model replies; prints one JSON line.

  python -m spade_jax.selfplay.play ENV.py --replies REPLIES.txt [--setting games|tool_use]
      [--seed N] [--hint [TEXT]] [--tokenizer tiny|DIR] [--isolation strict|basic|none]

REPLIES.txt holds one raw model reply per turn (thinking blocks, tool calls and all),
separated by lines `=====`. Each reply goes through what training uses: the reply parser
(`replies.py`), the chat formatting of the agent's conversation and the sandbox pool, in
the episode runner itself, with a scripted engine in place of the model. The line holds,
per turn, the reply's parts as the environment received them (`received`: strings and tool
calls), the observations and rewards that answered them and the parse errors; then the
return, terminated / truncated (truncated also when the replies run out before the episode
ends) and any environment error ("kind: detail"). `--hint` plays
the hint arm: with TEXT, that hint; alone, the seed library's hint of ENV.py. This is how
to debug an environment or a prompt change without a model. Exit status 0 whatever the
environment does; 2 for a usage error; 3 if the host cannot provide the isolation.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence

from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.envs.library import SEEDS_DIR, read_manifest
from spade_jax.sandbox import contract, isolation
from spade_jax.sandbox.api import EnvPool
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.selfplay import replies as replies_lib
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.episodes import EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.prompts import SETTINGS
from spade_jax.selfplay.timing import Timings
from spade_jax.tokenizer import load_tokenizer

SEPARATOR = "====="


def split_replies(text: str) -> list[str]:
  """Replies separated by lines that are exactly SEPARATOR (surrounding newlines dropped)."""
  chunks, current = [], []
  for line in text.split("\n"):
    if line.strip() == SEPARATOR:
      chunks.append("\n".join(current))
      current = []
    else:
      current.append(line)
  chunks.append("\n".join(current))
  return [c.strip("\n") for c in chunks if c.strip()]


class _Recorder:
  """The pool, recording each step's action and result under the turn being played."""

  def __init__(self, pool: EnvPool, turns: list[dict]):
    self.pool, self.turns = pool, turns

  def __getattr__(self, name):
    return getattr(self.pool, name)

  def step(self, actions):
    records = self.pool.step(actions)
    for (_, action), rec in zip(actions, records, strict=True):
      turn = self.turns[-1]
      turn["received"].append(action)
      turn["observations"].append(rec.observation)
      turn["rewards"].append(rec.reward)
    return records


def play(pool: EnvPool, tokenizer, source: str, replies: Sequence[str], *, setting: str = "games",
         seed: int = 0, hint: str | None = None, action_format: str = "<action>{}</action>",
         max_turns: int = contract.MAX_TURNS_CAP) -> dict:
  """Plays `replies` (one per turn) on `source` through the episode runner; see module doc."""
  if setting not in SETTINGS:
    raise ValueError(f"setting {setting!r} is not one of {SETTINGS}")
  texts, turns = list(replies), []
  eos = tokenizer.eos_id

  def reply_fn(cid, history, params):
    text = texts[len(turns)]
    turns.append({"reply": text, "received": [], "observations": [], "rewards": [],
                  "errors": []})
    ids = tokenizer.encode(text) + [eos]
    return ids, [0.0] * len(ids)

  spec = EpisodeSpec("play", "play", "hint" if hint else "no_hint", source, hint, seed, 0,
                     max(1, min(max_turns, len(texts))))
  params = SamplingParams(max_new_tokens=1 << 20, stop_token_ids=(eos,))
  (ep,) = play_episodes(FakeEngine(reply_fn, steps_per_poll=1 << 20), _Recorder(pool, turns),
                        ChatFormatter(tokenizer), [spec], EpisodeSettings(action_format, params),
                        Timings())
  for turn in turns:  # the same parse the runner made, for the errors it answered
    turn["errors"] = replies_lib.parse_reply(turn["reply"], tools=ep.tools,
                                             action_format=action_format).errors
  error = f"{ep.error_kind}: {ep.error_detail}" if ep.error_kind else None
  if setting == "tool_use" and ep.tools is None and error is None:
    error = "setting tool_use: the environment declares no tools"
  return {"setting": setting, "seed": seed, "arm": spec.arm,
          "tools": [t["function"]["name"] for t in ep.tools or []],
          "first_observation": ep.first_observation, "turns": turns,
          "return": ep.episode_return, "terminated": ep.terminated, "truncated": ep.truncated,
          "error": error}


def seed_hint(path: str) -> str | None:
  """The seed library's hint of the file at `path` (None when it is not a seed file)."""
  target = pathlib.Path(path).resolve()
  for entry in read_manifest():
    if (SEEDS_DIR / entry["file"]).resolve() == target:
      return entry["hint"]
  return None


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m spade_jax.selfplay.play",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("env", metavar="ENV.py")
  parser.add_argument("--replies", metavar="REPLIES.txt", required=True,
                      help=f"one raw reply per turn, separated by lines '{SEPARATOR}'")
  parser.add_argument("--setting", default="games", choices=SETTINGS)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--hint", nargs="?", const="", default=None, metavar="TEXT",
                      help="play the hint arm (alone: the seed library's hint of ENV.py)")
  parser.add_argument("--action-format", default="<action>{}</action>")
  parser.add_argument("--tokenizer", default="tiny", help='"tiny" or a checkpoint directory')
  parser.add_argument("--isolation", default="strict", choices=isolation.LEVELS)
  args = parser.parse_args(argv)
  try:
    source = pathlib.Path(args.env).read_text(encoding="utf-8")
    texts = split_replies(pathlib.Path(args.replies).read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError) as exc:
    parser.error(f"cannot read a file: {exc}")
  if not texts:
    parser.error(f"{args.replies} holds no reply")
  hint = args.hint
  if hint == "":
    hint = seed_hint(args.env)
    if hint is None:
      parser.error(f"--hint without TEXT needs a seed library file; {args.env} is not one")
  try:
    pool = SandboxPool(num_workers=1, isolation=args.isolation)
  except isolation.SandboxUnavailable as exc:
    print(f"sandbox unavailable: {exc}", file=sys.stderr)
    return 3
  with pool:
    out = play(pool, load_tokenizer(args.tokenizer), source, texts, setting=args.setting,
               seed=args.seed, hint=hint, action_format=args.action_format)
  print(json.dumps({"env": args.env, **out}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
