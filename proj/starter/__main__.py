"""`python -m proj.starter {build,warm,check,eval,gates}`: the starter policy (docs in
build.py, warm.py, check.py, gates.py).

  build --out DIR [--size starter|ci] [--minutes N] [--config starter] [--quiet]
  warm --from BUILD --out DIR [--family peek] [--rehearsal 0.5] [--minutes N] [--quiet]
  check DIR [--passages FILE.jsonl] [--designs 64] [--config starter]
  eval --checkpoint DIR --out FILE.jsonl [--seed S] [...]   # `spade_jax.eval run` on
                                  # minigames_heldout, sampled and sized as configs/starter.py
  gates --warm FILE.jsonl --retest FILE.jsonl --source FILE.jsonl [--family peek]

`build` and `warm` run themselves again once with transparent huge pages asked for
(huge_pages.py). Each prints one JSON object on the last stdout line; `check` exits 1 when a
gate fails (`gates` too). A missing directory, tokenizer or checkpoint, a bad config or share, or a
finished stage whose files changed since (`build`, `warm`), is one `error:` line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys

from proj.starter import build, check, gates, huge_pages, minigames, registry, warm
from spade_jax.config_schema import ConfigError
from spade_jax.eval.__main__ import main as eval_main
from spade_jax.model.hf_config import CheckpointError


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv[:1] == ["eval"]:  # its flags (and --help) are spade_jax.eval run's
    registry.register()
    eval_main(["run", *eval_defaults(), *argv[1:]])  # a flag given again wins
    return 0
  parser = argparse.ArgumentParser(prog="python -m proj.starter", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  verbs = parser.add_subparsers(dest="verb", required=True)
  b = verbs.add_parser("build", help="build the starter policy into --out")
  b.add_argument("--out", required=True)
  b.add_argument("--size", default="starter", choices=sorted(build.SIZES))
  b.add_argument("--minutes", type=float, default=None,
                 help="stop a training stage at this wall-clock budget (run again to go on)")
  b.add_argument("--config", default="starter",
                 help="config rendering the prompts: one of configs/ here by name, or a path")
  b.add_argument("--seed", type=int, default=0)
  b.add_argument("--without", action="append", default=[], choices=sorted(minigames.FAMILIES),
                 help="leave this minigame family out of the fine-tuning set (repeatable): "
                 "the source of a `warm` start on it")
  b.add_argument("--quiet", action="store_true", help="no progress bars")
  w = verbs.add_parser("warm", help="fine-tune a built starter further on one minigame family")
  w.add_argument("--from", dest="source", required=True, help="a finished build's --out")
  w.add_argument("--out", required=True)
  w.add_argument("--family", default="peek", choices=sorted(minigames.FAMILIES))
  w.add_argument("--rehearsal", type=float, default=0.5,
                 help="share of the fine-tuning rows drawn from the build's own")
  w.add_argument("--minutes", type=float, default=None)
  w.add_argument("--config", default="starter")
  w.add_argument("--seed", type=int, default=0)
  w.add_argument("--quiet", action="store_true")
  verbs.add_parser("eval", help="`spade_jax.eval run` with the starter's suites registered "
                   "(default --suite minigames_heldout)")
  g = verbs.add_parser("gates", help="the warm start's gates from minigames_heldout records")
  for name, what in (("warm", "the warm start's"), ("retest", "the warm start's at another "
                     "--seed"), ("source", "the build it started from")):
    g.add_argument(f"--{name}", required=True, help=f"{what} records (eval --out)")
  g.add_argument("--family", default="peek", choices=sorted(minigames.FAMILIES))
  c = verbs.add_parser("check", help="measure the designer and agent gates of a built DIR")
  c.add_argument("dir")
  c.add_argument("--passages", default=None, help="JSONL with a 'text' field per line")
  c.add_argument("--designs", type=int, default=64)
  c.add_argument("--episodes", type=int, default=None, help="seed_games_heldout items (all)")
  c.add_argument("--config", default="starter")
  c.add_argument("--quiet", action="store_true")
  args = parser.parse_args(argv)
  try:
    return _run(args)
  except (FileNotFoundError, CheckpointError, ConfigError, build.DamagedStage,
          warm.ShareError, gates.RecordsError) as err:
    print(f"error: {err}", file=sys.stderr)
    return 2


def eval_defaults(config: str = "starter") -> list[str]:
  """`eval`'s flags unless given: minigames_heldout, played as the config's loop plays and
  evaluates (its agent's temperature and reply cap, its engine's sizes)."""
  experiment = build.load_experiment(config)
  ev, engine = experiment.eval, experiment.engine
  sampling = [] if ev.temperature is None else ["--temperature", str(ev.temperature)]
  return ["--suite", "minigames_heldout", *sampling,
          "--max-new-tokens", str(ev.max_new_tokens), "--num-slots", str(engine.num_slots),
          "--max-cache-len", str(engine.max_cache_len),
          "--prefill-buckets", *map(str, engine.prefill_buckets)]


def _run(args: argparse.Namespace) -> int:
  if args.verb == "build":
    result = build.Build(args.out, args.size, config=args.config, minutes=args.minutes,
                         progress=not args.quiet, seed=args.seed,
                         without=tuple(args.without)).run()
    print(json.dumps(result))
    return 0
  if args.verb == "gates":
    result = gates.gates(*(gates.read_records(getattr(args, name))
                           for name in ("warm", "retest", "source")), family=args.family)
    print(json.dumps(result))
    return 0 if result["passed"] else 1
  if args.verb == "warm":
    result = warm.WarmStart(args.out, args.source, family=args.family, rehearsal=args.rehearsal,
                            config=args.config, minutes=args.minutes, progress=not args.quiet,
                            seed=args.seed).run()
    print(json.dumps(result))
    return 0
  result = check.check(args.dir, passages=args.passages, designs=args.designs,
                       episodes=args.episodes, config=args.config, progress=not args.quiet)
  print(json.dumps(result))
  return 0 if result["passed"] else 1


if __name__ == "__main__":
  if sys.argv[1:2] in (["build"], ["warm"]):
    huge_pages.restart_with_huge_pages()  # before jax allocates anything; see huge_pages.py
  sys.exit(main())
