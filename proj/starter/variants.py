"""Environment variants of the train-split seed games, each passed by the real validator.

(The starter's set also holds minigames, `proj/starter/minigames.py`: `minigame_candidates` is their
stream, built and resumed by the same `build_env_set`.)

A variant is a source transformation of one seed game (never a held-out one): the knobs of
`variant_tables` (constants, ranges, sizes, names, reward tiers, small rules, with the hint
edits they need), another class name, a longer turn limit, reworded messages, a pinned
difficulty level (`envs.difficulty.at_level`) and other action words (`rename_verbs`: the
agent's episodes of the set then teach it to read the words to play from the observation).
Candidate `index` of a seed draws one alternative per knob from a generator seeded by
(seed, game, index), so the stream is deterministic; a candidate that normalises to a source
seen before is skipped.

`build_env_set` walks the stream round-robin over the seeds, validates candidates in
batches through `SandboxPool(require_oracle=True)` (every guard on), and appends the valid
ones to a JSONL file (env_set.py); a rerun reads the file and goes on, so the set is always
the first `count` valid candidates of the stream. Run it once:

  python -m proj.starter.variants --out /tmp/envset.jsonl --count 320 \
      --tokenizer runs/starter/stages/tokenizer

Plain Python: this module never imports jax or the model.
"""

from __future__ import annotations

import argparse
import ast
import collections
import functools
import itertools
import json
import os
import random
import re
import sys
import time
import tokenize
from collections.abc import Iterator, Sequence

from proj.starter import minigames
from proj.starter import variant_tables as tables
from proj.starter.env_set import VariantEnv, append_env_set, read_env_set
from spade_jax.envs.difficulty import at_level, declared_levels
from spade_jax.envs.library import GAME_CATEGORIES, HELDOUT_GAMES, SeedEnv, load_seed_library
from spade_jax.sandbox import pyparse
from spade_jax.sandbox.config import SandboxConfig
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.tokenizer import Tokenizer, load_tokenizer

MAX_INDEX = 400  # candidates per seed game before the stream gives up on it
BATCH = 16  # candidates per validation call
RETRIED_RULES = ("time", "infra")  # a load-dependent rejection is validated once more
_MAX_TURNS = re.compile(r"^(\s+max_turns = )(\d+)$", re.MULTILINE)

__all__ = ["VariantEnv", "action_words", "build_env_set", "candidates", "load_env_set",
           "minigame_candidates", "normalise_source"]


def normalise_source(source: str) -> str:
  """The source without comments, docstrings and layout (`ast.unparse`), for copy detection.

  Text that does not parse is compared with its whitespace collapsed.
  """
  try:
    tree = pyparse.parse(source)
  except (SyntaxError, ValueError):
    return " ".join(source.split())
  for node in ast.walk(tree):
    body = getattr(node, "body", None)
    if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)):
      node.body = body[1:] or [ast.Pass()]
  return ast.unparse(tree)


def _edit(text: str, edits: tuple[tables.Edit, ...], where: str) -> str:
  for old, new in edits:
    if text.count(old) != 1:
      raise ValueError(f"variant_tables: {where}: {old!r} occurs {text.count(old)} times, "
                       "expected exactly once")
    text = text.replace(old, new)
  return text


def _class_name(source: str) -> str:
  return next(n.name for n in pyparse.parse(source).body if isinstance(n, ast.ClassDef))


def candidate(seed_env: SeedEnv, index: int, seed: int = 0, *, words: Sequence[str]
              ) -> VariantEnv:
  """Candidate `index` of a seed game: one alternative per knob, drawn from (seed, game, index),
  and its action words from `words` (action_words).

  Every candidate changes at least one rule knob or the level, so none is the seed renamed.
  """
  name = seed_env.name
  if name in HELDOUT_GAMES:
    raise ValueError(f"{name!r} is a held-out game; variants come from the train split only")
  rng = random.Random(f"{seed}/{name}/{index}")
  knobs = tables.KNOBS[name]
  picks = [rng.randrange(len(k) + 1) for k in knobs]
  level = rng.randrange(declared_levels(seed_env.source) or 1)  # 0: the seed's own default
  if not any(picks) and not level:
    which = rng.randrange(len(knobs))
    picks[which] = 1 + rng.randrange(len(knobs[which]))
  source, hint = seed_env.source, seed_env.hint
  for number, (alts, pick) in enumerate(zip(knobs, picks, strict=True)):
    if pick:
      alt = alts[pick - 1]
      source = _edit(source, alt.source, f"{name} knob {number}")
      hint = _edit(hint, alt.hint, f"{name} knob {number} (hint)")
  old_class = _class_name(source)
  new_class = rng.choice((old_class, *tables.CLASS_NAMES[name]))
  source = re.sub(rf"\b{old_class}\b", new_class, source)
  extra_turns = rng.choice((0, 0, 1, 2))
  source = _MAX_TURNS.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + extra_turns}", source,
                          count=1)
  for phrases in (tables.EPISODE_OVER, tables.CANNOT_PARSE):
    source = source.replace(phrases[0], rng.choice(phrases))
  if level:
    source = at_level(source, level)
  source, hint = rename_verbs(source, hint, _verb_draw(name, source, hint, rng, words))
  return VariantEnv(f"v/{name}/{index}", name, seed_env.category, source, hint)


def _verb_draw(name: str, source: str, hint: str, rng: random.Random,
               words: Sequence[str]) -> dict[str, str]:
  """Each action word of the game -> its word in this variant (tables.ACTION_VERBS): the seed's
  own with p = KEEP_VERB, else a word of `words` (action_words) found nowhere in the source,
  the hint or a held-out game, and no two action words become one."""
  taken = _words(source + " " + hint) | _held_out_words()
  renames = {}
  for verb in tables.ACTION_VERBS[name]:
    if rng.random() >= tables.KEEP_VERB:
      free = [w for w in words if w not in taken]
      if not free:
        raise ValueError(f"action words: all {len(words)} are taken by {name}'s source, hint "
                         "or the held-out games")
      renames[verb] = rng.choice(free)
      taken.add(renames[verb])
  return renames


def action_words(tok: Tokenizer) -> tuple[str, ...]:
  """The words a variant may draw for an action (sorted): every vocabulary piece that decodes
  to a space and a tables.ACTION_WORD, and that the tokenizer spells back as that one piece,
  less the held-out games' words. One piece each, so that a reply's first action token can
  only be copied from the observation, never predicted from what such words share."""
  held_out = _held_out_words()
  words = set()
  for token_id in range(tok.vocab_size):
    text = tok.decode([token_id])
    word = text[1:]
    if (text[:1] == " " and tables.ACTION_WORD.fullmatch(word) and word not in held_out
        and tok.encode(text) == [token_id]):
      words.add(word)
  if len(words) < tables.MIN_ACTION_WORDS:
    raise ValueError(f"tokenizer: {len(words)} one-piece words can be action words, expected at "
                     f"least {tables.MIN_ACTION_WORDS} (a larger vocabulary)")
  return tuple(sorted(words))


@functools.cache
def _held_out_words() -> frozenset[str]:
  """Every word (lower case) of the held-out games' sources and hints."""
  games = load_seed_library(kind="games", split="heldout")
  return frozenset(_words(" ".join(g.source + " " + g.hint for g in games)))


def _words(text: str) -> set[str]:
  """The words of `text`, lower case (runs of ASCII letters)."""
  return {w.lower() for w in re.findall(r"[A-Za-z]+", text)}


def rename_verbs(source: str, hint: str, renames: dict[str, str]) -> tuple[str, str]:
  """Every whole-word occurrence of each old word (lower, Title or UPPER case, the case kept)
  replaced in the hint and in the source's strings and comments. Python names, f-string fields
  included, are left alone: `set` the action word changes, `set()` and `{answer}` do not."""
  if not renames:
    return source, hint
  forms = {case(old): case(new) for old, new in renames.items()
           for case in (str.lower, str.title, str.upper)}
  pattern = re.compile(r"\b(" + "|".join(map(re.escape, forms)) + r")\b")
  code = _code_offsets(source)
  source = pattern.sub(lambda m: m.group(0) if m.start() in code else forms[m.group(0)], source)
  return source, pattern.sub(lambda m: forms[m.group(0)], hint)


def _code_offsets(source: str) -> set[int]:
  """Offsets where a Python name starts, or that lie inside an f-string's replacement field."""
  line_starts = [0, *itertools.accumulate(len(line) for line in source.splitlines(True))]
  offsets = set()
  for tok in tokenize.generate_tokens(iter(source.splitlines(True)).__next__):
    at = line_starts[tok.start[0] - 1] + tok.start[1]
    if tok.type == tokenize.NAME:
      offsets.add(at)
    elif tok.type == tokenize.STRING and "f" in tok.string.split(tok.string[-1])[0].lower():
      offsets.update(at + i for i in _field_offsets(tok.string))
  return offsets


def _field_offsets(text: str) -> Iterator[int]:
  """Offsets inside an f-string literal's replacement fields (`{{` and `}}` are text)."""
  depth, i = 0, 0
  while i < len(text):
    if depth == 0 and text[i:i + 2] in ("{{", "}}"):
      i += 2
      continue
    depth += (text[i] == "{") - (text[i] == "}")
    if depth:
      yield i
    i += 1


def train_seeds() -> list[SeedEnv]:
  return load_seed_library(kind="games", split="train")


def candidates(seed: int = 0, categories: Sequence[str] | None = None, *, words: Sequence[str]
               ) -> Iterator[VariantEnv]:
  """The deterministic candidate stream: index 0 of every seed game, then index 1, ...; action
  words are drawn from `words` (action_words).

  A candidate whose normalised source equals a seed's or an earlier candidate's is skipped.
  categories, when given, keeps the seed games of those skill categories only.
  """
  seeds = train_seeds()
  seen = {normalise_source(s.source) for s in seeds}
  kept = [s for s in seeds if categories is None or s.category in categories]
  for index in range(MAX_INDEX):
    for seed_env in kept:
      env = candidate(seed_env, index, seed, words=words)
      key = normalise_source(env.source)
      if key not in seen:
        seen.add(key)
        yield env


def minigame_candidates(seed: int = 0, categories: Sequence[str] | None = None,
                        families: Sequence[str] | None = None) -> Iterator[VariantEnv]:
  """The minigame stream (minigames.py) as set candidates, skipping repeated sources and
  the loop's minigame library (so a design that copies its memory is not a training copy);
  categories / families, when given, keep the families of those skill categories / names
  only."""
  seen = {normalise_source(g.source) for g in minigames.library()}
  for game in minigames.stream(seed):
    if (categories is not None and game.category not in categories
        or families is not None and game.family not in families):
      continue
    key = normalise_source(game.source)
    if key not in seen:
      seen.add(key)
      yield VariantEnv(game.uid, game.family, game.category, game.source, game.hint)


KINDS = ("variants", "minigames")  # the candidate streams of an env set


def _rule(reason: str | None) -> str:
  return (reason or "invalid").split(":", 1)[0].strip()


def _validate(pool: SandboxPool, batch: list[VariantEnv], rejected: collections.Counter
              ) -> list[VariantEnv]:
  """The valid ones of `batch`, in order; load-dependent rejections are tried once more."""
  verdicts = dict(zip((e.uid for e in batch), pool.validate([e.source for e in batch]),
                      strict=True))
  again = [e for e in batch if _rule(verdicts[e.uid].reason) in RETRIED_RULES]
  if again:
    verdicts.update(zip((e.uid for e in again), pool.validate([e.source for e in again]),
                        strict=True))
  for env in batch:
    if not verdicts[env.uid].valid:
      rejected[_rule(verdicts[env.uid].reason)] += 1
  return [e for e in batch if verdicts[e.uid].valid]


def load_env_set(path: str | os.PathLike) -> list[VariantEnv]:
  """The set a build wrote (a damaged last line is dropped with a warning)."""
  return read_env_set(path)


def build_env_set(out_path: str | os.PathLike, *, count: int = 320, seed: int = 0,
                  num_workers: int = SandboxConfig.num_workers, progress: bool = True,
                  stats: dict | None = None, kind: str = "variants",
                  categories: Sequence[str] | None = None,
                  words: Sequence[str] | None = None,
                  families: Sequence[str] | None = None) -> list[VariantEnv]:
  """The first `count` valid candidates of the `kind` stream (`candidates`, whose action words
  come from `words`, or `minigame_candidates`; of `categories` and minigame `families` when
  given), written to and resumed from `out_path`.

  stats, when given, is filled with {"validated", "reused", "rejected": {rule: n}}.
  """
  stored = {e.uid: e for e in read_env_set(out_path, repair=True)}
  envs, rejected, validated = [], collections.Counter(), 0
  if kind not in KINDS:
    raise ValueError(f"env set kind {kind!r}: expected one of {KINDS}")
  unknown = sorted(set(categories or ()) - set(GAME_CATEGORIES))
  if unknown:
    raise ValueError(f"categories {unknown}: expected some of {GAME_CATEGORIES}")
  unknown = sorted(set(families or ()) - set(minigames.FAMILIES))
  if unknown or families is not None and kind != "minigames":
    raise ValueError(f"families {unknown or list(families)}: minigame families are some of "
                     f"{sorted(minigames.FAMILIES)}, for the minigames kind only")
  if kind == "variants" and not words:
    raise ValueError("variants need action words (action_words of the build's tokenizer)")
  stream = (candidates(seed, categories, words=words) if kind == "variants"
            else minigame_candidates(seed, categories, families))
  start, pool = time.monotonic(), None
  try:
    while len(envs) < count:
      batch = list(itertools.islice(stream, min(BATCH, count - len(envs))))
      if not batch:
        break
      reused = [e for e in batch if e.uid in stored]
      for env in reused:
        if stored[env.uid] != env:
          raise ValueError(f"{out_path}: {env.uid} differs from this build's candidate (another "
                           "seed or version of the tables): use a new --out")
      fresh = [e for e in batch if e.uid not in stored]
      if fresh and pool is None:
        pool = SandboxPool(num_workers=num_workers, require_oracle=True)
      valid = {e.uid for e in _validate(pool, fresh, rejected)} if fresh else set()
      validated += len(fresh)
      kept = [e for e in batch if e.uid in stored or e.uid in valid]
      append_env_set(out_path, [e for e in kept if e.uid not in stored])
      envs += kept
      if progress:
        _progress(kind, len(envs), count, validated, rejected, time.monotonic() - start)
  finally:
    if pool is not None:
      pool.close()
  if progress:
    print(file=sys.stderr)
  if len(envs) < count:
    raise RuntimeError(f"only {len(envs)} of {count} variants passed validation "
                       f"(rejections: {dict(rejected)})")
  if stats is not None:
    stats.update(validated=validated, reused=len(stored), rejected=dict(rejected))
  return envs


def _progress(kind: str, done: int, count: int, validated: int, rejected: collections.Counter,
              elapsed: float) -> None:
  eta = elapsed / max(validated, 1) * (count - done) if validated else 0.0
  print(f"\r[{kind}] {done}/{count} valid, {validated} validated, "
        f"{sum(rejected.values())} rejected, ETA {eta:.0f} s", end="", file=sys.stderr,
        flush=True)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m proj.starter.variants",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, help="JSONL file (resumed when it exists)")
  parser.add_argument("--count", type=int, default=320)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--num-workers", type=int, default=SandboxConfig.num_workers,
                      help="sandbox jails (config.sandbox.num_workers' default)")
  parser.add_argument("--kind", choices=KINDS, default="variants",
                      help="seed-game variants or minigames (proj/starter/minigames.py)")
  parser.add_argument("--categories", default=None,
                      help="comma-separated skill categories to keep (all when left out)")
  parser.add_argument("--tokenizer", default=None,
                      help="tokenizer whose one-piece words the variants' action words are drawn "
                           "from (a build's stages/tokenizer); needed for --kind variants")
  args = parser.parse_args(argv)
  if args.kind == "variants" and not args.tokenizer:
    parser.error("--tokenizer is needed for --kind variants (a build's stages/tokenizer)")
  categories = args.categories.split(",") if args.categories else None
  start, stats = time.monotonic(), {}
  try:
    words = action_words(load_tokenizer(args.tokenizer)) if args.kind == "variants" else None
    envs = build_env_set(args.out, count=args.count, seed=args.seed,
                         num_workers=args.num_workers, stats=stats, kind=args.kind,
                         categories=categories, words=words)
  except (ValueError, FileNotFoundError) as err:  # a bad category, tokenizer or set file
    print(f"error: {err}", file=sys.stderr)
    return 2
  per_seed = collections.Counter(e.base for e in envs)
  print(json.dumps({"out": args.out, "count": len(envs), "wall_s": round(time.monotonic() - start,
                    2), "per_seed": dict(sorted(per_seed.items())), **stats}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
