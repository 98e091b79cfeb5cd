"""spade_jax.eval: held-out evaluation of a checkpoint or of the weights being trained.

`python -m spade_jax.eval {run,score,compare}` (docs/eval.md); `evaluate.evaluate` runs
suites on an engine (the CLI and the composition root call it); `suites.SUITES` names every
suite; `extract` holds the answer extraction; `config.EvalConfig` is `config.eval`.
Evaluation sits above self-play: it uses the engine, the sandbox pool, the seed library and
self-play's episode runner and reply parser, and nothing below imports it.
"""
