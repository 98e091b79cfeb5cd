"""`warm`: a built starter fine-tuned further on one minigame family, with rehearsal.

The starter is not rebuilt to learn a new family (issue 49's probing `peek` games, whose hint
carries a strategy): its build directory's exported model is fine-tuned on the family's
designs and arm-dependent agent play (sft_data: the hinted arm follows the hint, the unhinted
arm plays as an agent that was not told), mixed with a `rehearsal` share of the rows the
build itself was fine-tuned on, so that what it already does is rehearsed, not overwritten.

Stages, resumable and fingerprinted as `build`'s (build.py), under <out>/stages/:
envs (the family's first valid minigames of the training seed) -> sft (the new rows plus the
rehearsal rows, cached in sft_examples.jsonl; from <from>'s model) -> export (<out> is a
Hugging Face directory with <from>'s tokenizer).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from proj.starter import build, sft_data, variants
from spade_jax import run
from spade_jax.selfplay.seeding import derive_rng

# What a warm start changes in the source build's size: the family's games, each played at
# several reset seeds (its arm-dependent agent rows are the one signal the hinted arm learns
# from: at one reset the starter underfit them, bench/RESULTS_LOG.md), and a shorter,
# gentler fine-tuning than the build's.
WARM_SIZES: dict[str, dict[str, Any]] = {
    "starter": dict(minigame_count=96, minigame_resets=4, sft_epochs=2, sft_learning_rate=5e-4),
    "ci": dict(minigame_count=8, minigame_resets=2, sft_epochs=2, sft_learning_rate=1e-3),
}


class ShareError(ValueError):
  """A rehearsal share outside [0, 1)."""


def check_share(share: float) -> None:
  if not 0 <= share < 1:
    raise ShareError(f"--rehearsal {share}: a share in [0, 1)")


def rehearsal_rows(old: list[dict[str, Any]], new: int, share: float, seed: int
                   ) -> list[dict[str, Any]]:
  """Rows drawn from `old` (seeded, without replacement, in their order) so that they are
  `share` of them plus `new` rows: round(share / (1 - share) * new), at most all of `old`."""
  check_share(share)
  want = min(len(old), round(share / (1 - share) * new))
  picks = derive_rng(seed, "starter-rehearsal").choice(len(old), size=want, replace=False)
  return [{**old[i], "rehearsal": True} for i in sorted(picks)]


class WarmStart(build.Build):
  """The stages of one warm-start directory (module doc); `run()` does what is not done."""

  STAGES = ("envs", "sft", "export")

  def __init__(self, out, source, *, family: str = "peek", rehearsal: float = 0.5,
               config: str = "starter", minutes: float | None = None, progress: bool = True,
               seed: int = 0):
    check_share(rehearsal)
    self.source = pathlib.Path(source).absolute()
    summary = self.source / "build.json"
    if not (self.source / "config.json").is_file() or not summary.is_file():
      raise FileNotFoundError(f"--from {source}: not a finished starter build (no config.json "
                              "and build.json)")
    size = json.loads(summary.read_text())["size"]
    super().__init__(out, size, config=config, minutes=minutes, progress=progress, seed=seed)
    self.size = dataclasses.replace(self.size, **WARM_SIZES[size])
    self.family, self.rehearsal = family, rehearsal

  def _stage_files(self, name: str) -> dict[str, Any]:
    if name == "envs":
      return {"sha256": [self.stages / build.ENV_FILES["minigames"]]}
    return super()._stage_files(name)

  def _tokenizer_dir(self) -> pathlib.Path:
    return self.source / "stages" / "tokenizer"

  def _sft_base(self) -> pathlib.Path:
    return self.source

  def _envs(self) -> dict[str, Any]:
    envs = variants.build_env_set(self.stages / build.ENV_FILES["minigames"],
                                  count=self.size.minigame_count, seed=self.seed,
                                  num_workers=self.experiment.sandbox.num_workers,
                                  progress=self.progress, kind="minigames",
                                  families=(self.family,))
    return {"count": {"minigames": len(envs)}, "family": self.family}

  def _example_rows(self) -> list[dict[str, Any]]:
    """The family's designer and agent examples, and the rehearsal rows."""
    tok = self.tokenizer()
    games = variants.load_env_set(self.stages / build.ENV_FILES["minigames"])
    pool = run.build_pool(self.experiment)
    try:
      rows = (sft_data.designer_examples(games, tok, self.selfplay, seed=self.seed,
                                         per_env=self.size.designer_per_env,
                                         max_chars=self.experiment.corpus.max_chars)
              + sft_data.agent_examples(games, tok, self.selfplay, pool, seed=self.seed,
                                        resets=self.size.minigame_resets))
    finally:
      pool.close()
    new = [build.cache_row(ex) for ex in rows]
    cache = self.source / "stages" / "sft_examples.jsonl"
    old = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]
    return new + rehearsal_rows(old, len(new), self.rehearsal, self.seed)
