"""`python -m spade_jax.eval {run,score,compare}`: held-out evaluation (docs/eval.md).

  run      --checkpoint PATH --suite A[,B...] [--samples K] [--limit N] [--out FILE.jsonl]
  score    --suite NAME --predictions FILE.jsonl [--out FILE.jsonl]
  compare  RUN_A.json RUN_B.json

`run` and `score` write one JSON line per item to --out (default under runs/eval/: run
<checkpoint name>.jsonl, score <predictions name>.<suite>.jsonl) and the summary to
<out without .jsonl>.summary.json; a line per suite goes to stderr, and the last line on
stdout is the summary as one JSON object (with "out" and "summary", the two paths).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from spade_jax import storage
from spade_jax.eval import compare, evaluate
from spade_jax.eval.suites import get_suite
from spade_jax.sandbox.config import SandboxConfig
from spade_jax.sandbox.pool import SandboxPool


def _data(pairs: list[str]) -> dict[str, str]:
  out = {}
  for pair in pairs:
    name, sep, path = pair.partition("=")
    if not sep or not path:
      raise SystemExit(f"--data expects NAME=PATH, got {pair!r}")
    out[name] = path
  return out


def _pool(args) -> SandboxPool:
  return SandboxPool(num_workers=args.num_workers, reset_timeout_s=args.timeout_s,
                     isolation=args.isolation)


def _summary_path(out: str) -> str:
  """<out without .jsonl>.summary.json, beside `out` (a local file or gs://)."""
  return out.removesuffix(".jsonl") + ".summary.json"


def default_out(args) -> str:
  """runs/eval/<checkpoint name>.jsonl for `run`, runs/eval/<predictions>.<suite>.jsonl for
  `score`; a trainer step <workdir>/checkpoints/<N> is named <workdir>-step<N>."""
  if args.verb == "score":
    return f"runs/eval/{storage.path(args.predictions).stem}.{args.suite}.jsonl"
  parts = [p for p in args.checkpoint.rstrip("/").split("/") if p not in ("", ".")]
  if len(parts) >= 3 and parts[-2] == "checkpoints" and parts[-1].isdigit():
    parts.append(f"{parts.pop(-3)}-step{parts.pop()}")
  elif len(parts) >= 2 and parts[-1] == "checkpoints":
    parts.pop()
  return f"runs/eval/{parts[-1] if parts else 'checkpoint'}.jsonl"


def _write_summary(out: str, summaries, meta: dict) -> None:
  """The summary file; a line per suite on stderr; the summary as one JSON line on stdout."""
  doc = {**meta, "suites": {name: s.to_json() for name, s in summaries.items()}}
  storage.write_text(_summary_path(out), json.dumps(doc, indent=1) + "\n")
  for s in summaries.values():
    print(f"{s.suite}: {s.metric} = {s.value:.4f} ± {s.stderr:.4f} (n={s.n}, "
          f"no answer {s.no_answer}, unscored {s.unscored}) {s.extra or ''}", file=sys.stderr)
  print(f"wrote {out} and {_summary_path(out)}", file=sys.stderr)
  print(json.dumps({**doc, "out": out, "summary": _summary_path(out)}), flush=True)


def engine_sizes(args) -> dict:
  """`run`'s engine sizes: the flags given, config.engine's defaults (EngineConfig) for the
  rest."""
  from spade_jax.engine.config import EngineConfig  # pylint: disable=import-outside-toplevel
  return {"num_slots": args.num_slots or EngineConfig.num_slots,
          "max_cache_len": args.max_cache_len or EngineConfig.max_cache_len,
          "prefill_buckets": tuple(args.prefill_buckets or EngineConfig.prefill_buckets)}


def _run(args) -> None:
  # jax and the model load only for `run` (score and compare start in a second).
  from spade_jax.engine.api import SamplingParams
  from spade_jax.eval.generate import Generator
  from spade_jax.eval.load import engine_for, tokenizer_for
  from spade_jax.model.hf_config import CheckpointError
  data = _data(args.data)
  names = [n for n in args.suite.split(",") if n]
  suites = [get_suite(n, data.get(n)) for n in names]  # fail on a bad name before loading
  for s in suites:
    if s.not_playable:
      raise SystemExit(s.not_playable)
  try:
    tokenizer = tokenizer_for(args.checkpoint, args.tokenizer)
  except ValueError as e:  # no tokenizer to be found: one line, not a traceback
    raise SystemExit(f"error: {e}") from None
  try:
    engine, cache_len = engine_for(args.checkpoint, dtype=args.dtype, **engine_sizes(args))
  except CheckpointError as e:  # missing, damaged or mismatched files: one line
    raise SystemExit(f"error: {e}") from None
  pool = _pool(args) if any(s.needs_pool for s in suites) else None
  generator = Generator(engine, tokenizer, SamplingParams(max_new_tokens=1, seed=args.seed),
                        cache_len, progress=not args.quiet)
  requests = [evaluate.SuiteRequest(s.name, data.get(s.name), args.limit, args.samples)
              for s in suites]
  start = time.perf_counter()
  try:
    summaries = evaluate.evaluate(requests, generator, pool, args.out,
                                  max_new_tokens=args.max_new_tokens,
                                  temperature=args.temperature, top_p=args.top_p)
  finally:
    if pool is not None:
      pool.close()
  _write_summary(args.out, summaries, {"checkpoint": args.checkpoint, "limit": args.limit,
                                       "wall_s": round(time.perf_counter() - start, 1)})


def _score(args) -> None:
  suite = get_suite(args.suite, _data(args.data).get(args.suite))
  pool = _pool(args) if suite.needs_pool else None
  try:
    summaries = evaluate.score_file(args.suite, args.predictions, _data(args.data).get(args.suite),
                                    pool, args.out)
  finally:
    if pool is not None:
      pool.close()
  _write_summary(args.out, summaries, {"predictions": args.predictions})


def _compare(args) -> None:
  print(compare.table(compare.load_summary(args.a), compare.load_summary(args.b),
                      (storage.path(args.a).stem[:10], storage.path(args.b).stem[:10])))


def build_parser() -> argparse.ArgumentParser:
  """The command line: verbs run, score and compare."""
  parser = argparse.ArgumentParser(prog="python -m spade_jax.eval", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  verbs = parser.add_subparsers(dest="verb", required=True)
  run = verbs.add_parser("run", help="generate with a checkpoint and score")
  run.add_argument("--checkpoint", required=True)
  run.add_argument("--tokenizer", default=None, help="default: the checkpoint's own "
                   "tokenizer.json, or the one a trainer workdir's config.json names")
  run.add_argument("--suite", required=True, help="comma-separated suite names")
  run.add_argument("--samples", type=int, default=None, help="responses per item")
  run.add_argument("--limit", type=int, default=None, help="first N items of each suite")
  run.add_argument("--max-new-tokens", type=int, default=None)
  run.add_argument("--temperature", type=float, default=None)
  run.add_argument("--top-p", type=float, default=None)
  run.add_argument("--seed", type=int, default=0)
  run.add_argument("--dtype", default="float32")
  # Engine sizes: unset = config.engine's defaults (spade_jax/engine/config.py, EngineConfig).
  run.add_argument("--num-slots", type=int, default=None, help="default: config.engine's")
  run.add_argument("--max-cache-len", type=int, default=None, help="default: config.engine's")
  run.add_argument("--prefill-buckets", type=int, nargs="+", default=None,
                   help="default: config.engine's")
  run.add_argument("--quiet", action="store_true", help="no progress bar")
  score = verbs.add_parser("score", help="score predictions written elsewhere (no model)")
  score.add_argument("--suite", required=True)
  score.add_argument("--predictions", required=True)
  for verb in (run, score):
    verb.add_argument("--out", default=None, help="records, one JSON line per item (default: "
                      "runs/eval/<checkpoint name>.jsonl; score: <predictions>.<suite>.jsonl)")
    verb.add_argument("--data", action="append", default=[], metavar="NAME=PATH",
                      help="data file of a suite whose data users bring (aime, gpqa, ...)")
    verb.add_argument("--isolation", default=SandboxConfig.isolation,
                      help="least sandbox isolation accepted")
    verb.add_argument("--num-workers", type=int, default=SandboxConfig.num_workers,
                      help="sandbox jails (config.sandbox.num_workers' default)")
    verb.add_argument("--timeout-s", type=float, default=10.0, help="wall clock per program")
  cmp = verbs.add_parser("compare", help="per-suite table of two summary files")
  cmp.add_argument("a")
  cmp.add_argument("b")
  return parser


def main(argv=None) -> None:
  args = build_parser().parse_args(argv)
  if args.verb != "compare" and args.out is None:
    args.out = default_out(args)
  {"run": _run, "score": _score, "compare": _compare}[args.verb](args)


if __name__ == "__main__":
  sys.exit(main())
