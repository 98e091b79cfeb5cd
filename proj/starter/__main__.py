"""`python -m proj.starter {build,check}`: the starter policy (docs in build.py, check.py).

  build --out DIR [--size starter|ci] [--minutes N] [--config starter] [--quiet]
  check DIR [--passages FILE.jsonl] [--designs 64] [--config starter]

`build` runs itself again once with transparent huge pages asked for (huge_pages.py).
Both print one JSON object on the last stdout line; `check` exits 1 when a gate fails. A
missing directory, tokenizer or checkpoint, a bad config, or a finished stage whose files
changed since (`build`), is one `error:` line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys

from proj.starter import build, check, huge_pages
from spade_jax.config_schema import ConfigError
from spade_jax.model.hf_config import CheckpointError


def main(argv=None) -> int:
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
  b.add_argument("--quiet", action="store_true", help="no progress bars")
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
  except (FileNotFoundError, CheckpointError, ConfigError, build.DamagedStage) as err:
    print(f"error: {err}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
  if args.verb == "build":
    result = build.Build(args.out, args.size, config=args.config, minutes=args.minutes,
                         progress=not args.quiet, seed=args.seed).run()
    print(json.dumps(result))
    return 0
  result = check.check(args.dir, passages=args.passages, designs=args.designs,
                       episodes=args.episodes, config=args.config, progress=not args.quiet)
  print(json.dumps(result))
  return 0 if result["passed"] else 1


if __name__ == "__main__":
  if sys.argv[1:2] == ["build"]:
    huge_pages.restart_with_huge_pages()  # before jax allocates anything; see huge_pages.py
  sys.exit(main())
