"""`build`: tokenizer -> environment set -> pretraining -> fine-tuning -> Hugging Face directory.

Each stage leaves its result under <out>/stages/ and a `<stage>.done.json` marker; running the
command again skips finished stages, and a training stage killed part-way continues from its
last checkpoint (train_stage.py). Every random choice is seeded and every file list sorted,
so the same installation and command give the same model. Each stage's marker (and build.json)
carries the sha256 of the files it left, so two builds can be compared stage by stage (the
first fingerprint that differs says where they part), and a run that skips a finished stage
first checks its files against them: a changed or damaged file stops the build with one line
instead of being trained on. The result is <out> itself:
config.json + model.safetensors (save_pretrained) beside tokenizer.json and
tokenizer_config.json (with the chat template), which `spade_jax.model.from_pretrained`,
`python -m spade_jax.eval run --checkpoint <out>` and transformers open.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import sys
import time
from typing import Any

import numpy as np

from proj.starter import copy_circuit, pretrain_text, registry, sft_data, tokenizer_train, variants
from proj.starter.batches import BucketPlan, WindowPlan
from proj.starter.copy_test import repeat_test
from proj.starter.lm_step import batch_multiple
from proj.starter.minigames import FAMILIES as MINIGAME_FAMILIES
from proj.starter.train_stage import StageSettings, train
from spade_jax import config_schema, run
from spade_jax.experiment import Experiment
from spade_jax.model import from_pretrained, make_mesh, save_pretrained
from spade_jax.model.config import resolve_compute_dtype
from spade_jax.model.testing import random_model
from spade_jax.tokenizer import load_tokenizer
from spade_jax.tokenizer.base import ENDOFTEXT

STAGES = ("tokenizer", "envs", "pretrain", "sft", "export")
# The fine-tuning set: seed-game variants (agent episodes) and minigames (design targets, the
# starter loop's library family, and agent episodes).
ENV_FILES = {"variants": "envs.jsonl", "minigames": "minigames.jsonl"}


class DamagedStage(Exception):
  """A finished stage's files no longer match the fingerprints in its marker."""


@dataclasses.dataclass(frozen=True)
class BuildSize:
  """Everything `--size` sets: model, data amounts and the two training stages."""

  preset: str
  tokenizer_chars: int  # text the BPE is trained on
  pretrain_chars: int  # pretraining text (code + science)
  window: int  # pretraining sequence length
  pretrain_rows: int  # windows a step
  pretrain: StageSettings
  env_count: int  # seed-game variants in the fine-tuning set (agent episodes)
  minigame_count: int  # minigames in it (design targets and agent episodes)
  sft_tokens_per_step: int  # padded tokens a fine-tuning step
  sft_epochs: int
  sft_learning_rate: float
  sft_min_bucket: int = 256  # fine-tuning length buckets (batches.bucket_length)
  sft_bucket_step: int = 1024
  sft_max_length: int | None = None  # longer examples are left out; None: the model's positions
  # Matmul dtype of both stages (parameters and AdamW moments stay float32); "auto" is bf16
  # where the hardware has bf16 dots, fp32 on other CPUs (model.config.resolve_compute_dtype).
  compute_dtype: str = "auto"
  designer_per_env: int = 1  # designer examples an environment (passages and memory differ)
  variant_resets: int = 1  # reset seeds a seed-game variant's oracle episodes are played at
  minigame_resets: int = 1  # reset seeds a minigame's agent episodes are played at
  sft_copy_rows: int = 0  # copy rows among the fine-tuning examples (sft_data.copy_examples)
  # Write a previous-token and an induction head into the random model before pretraining
  # (starter.copy_circuit): copying does not form on its own in a CPU build's tokens.
  copy_circuit: bool = True


SIZES: dict[str, BuildSize] = {
    "starter": BuildSize(
        preset="starter", tokenizer_chars=8_000_000, pretrain_chars=12_000_000, window=1024,
        pretrain_rows=8, pretrain=StageSettings(num_steps=240, learning_rate=2e-3,
                                                warmup_steps=20, save_every=20),
        env_count=320, minigame_count=360, sft_tokens_per_step=16_384, sft_epochs=3,
        sft_learning_rate=2e-3, sft_bucket_step=512, designer_per_env=4, variant_resets=2,
        sft_copy_rows=1200),
    # The CI test's starter, built with --config starter_ci (one skill: the `guess`
    # minigames): a model that copies a minigame's edit token-perfect after a few hundred
    # short fine-tuning steps, in minutes of 2 CPU cores (bench/RESULTS.md).
    "ci": BuildSize(
        preset="starter-ci", tokenizer_chars=600_000, pretrain_chars=300_000, window=256,
        pretrain_rows=4, pretrain=StageSettings(num_steps=40, learning_rate=3e-3,
                                                warmup_steps=2, save_every=10),
        env_count=1, minigame_count=32, sft_tokens_per_step=2560, sft_epochs=6,
        sft_learning_rate=3e-3, sft_min_bucket=256, sft_bucket_step=256, sft_max_length=1536,
        compute_dtype="float32", designer_per_env=3, copy_circuit=False),
}


CONFIG_DIR = pathlib.Path(__file__).parent / "configs"


def config_path(name: str) -> str:
  """'starter', 'starter_ci.py' (the project's configs/) or any file's path -> a path."""
  for candidate in (CONFIG_DIR / name, CONFIG_DIR / f"{name}.py", pathlib.Path(name)):
    if candidate.is_file():
      return str(candidate)
  names = sorted(p.stem for p in CONFIG_DIR.glob("*.py"))
  raise config_schema.ConfigError(f"--config={name!r}: no such file, nor a config of "
                                  f"{CONFIG_DIR}/ ({names})")


def load_experiment(name: str = "starter") -> Experiment:
  """The typed experiment of a config (`config_path`); its files are the build's to make,
  unchecked."""
  return config_schema.validate(config_schema.config_of(config_path(name)), files=False)


class Build:
  """The stages of one build directory; `run()` does what is not done yet."""

  STAGES = STAGES

  def __init__(self, out: str | os.PathLike, size: str = "starter", *, config: str = "starter",
               minutes: float | None = None, progress: bool = True, seed: int = 0,
               without: tuple[str, ...] = ()):
    if size not in SIZES:
      raise ValueError(f"--size {size!r}: expected one of {sorted(SIZES)}")
    unknown = sorted(set(without) - set(MINIGAME_FAMILIES))
    if unknown:
      raise ValueError(f"--without {unknown}: minigame families are {sorted(MINIGAME_FAMILIES)}")
    # Minigame families left out of the fine-tuning set: a build that a warm start (warm.py)
    # then teaches them to, as issue 49 asks of the peek family.
    self.without = tuple(sorted(set(without)))
    self.out = pathlib.Path(out).absolute()
    self.stages = self.out / "stages"
    self.size, self.size_name = SIZES[size], size
    self.experiment = load_experiment(config)
    self.selfplay = self.experiment.selfplay
    self.progress, self.seed = progress, seed
    self.deadline = None if minutes is None else time.time() + 60 * minutes
    self.cfg = registry.PRESETS[self.size.preset].replace(
        compute_dtype=resolve_compute_dtype(self.size.compute_dtype))

  def run(self) -> dict[str, Any]:
    self.stages.mkdir(parents=True, exist_ok=True)
    summary = {"size": self.size_name, "preset": self.size.preset,
               "compute_dtype": self.cfg.compute_dtype, "without": list(self.without)}
    for name in self.STAGES:
      marker = self.stages / f"{name}.done.json"
      if marker.is_file():
        summary[name] = self._verified(name, marker)
        self._check_without(name, summary[name], marker)
        self._say(f"stage {name}: done before, skipped")
        continue
      began = time.time()
      self._say(f"stage {name} ...")
      result = getattr(self, f"_{name}")()
      result["wall_s"] = round(time.time() - began, 1)
      if not result.get("stopped_early"):
        result.update(self._fingerprints(name))
        _write_json(marker, result)
      summary[name] = result
      if result.get("stopped_early"):
        self._say(f"stage {name} stopped at the --minutes deadline; run again to continue")
        break
    _write_json(self.out / "build.json", summary)
    return summary

  def _stage_files(self, name: str) -> dict[str, Any]:
    """The files a finished stage left, by fingerprint key."""
    s = self.stages
    return {"tokenizer": {"sha256": (s / "tokenizer").glob("*")},
            "envs": {"sha256": [s / f for f in ENV_FILES.values()]},
            "pretrain": {"model_sha256": (s / "pretrain_model").glob("*")},
            "sft": {"data_sha256": [s / "sft_examples.jsonl"],
                    "model_sha256": (s / "sft_model").glob("*")},
            "export": {"sha256": (p for p in self.out.iterdir()
                                  if p.is_file() and p.name != "build.json")}}[name]

  def _fingerprints(self, name: str) -> dict[str, str]:
    """sha256 of the files a finished stage left; the pretraining windows as an array (the
    .npz holds write times)."""
    out = {key: _sha256_files(paths) for key, paths in self._stage_files(name).items()}
    if name == "pretrain":
      windows = np.load(self.stages / "pretrain_tokens.npz")["windows"]
      out["data_sha256"] = hashlib.sha256(np.ascontiguousarray(windows).tobytes()).hexdigest()
    return out

  def _verified(self, name: str, marker: pathlib.Path) -> dict[str, Any]:
    """A finished stage's marker, once its files match the fingerprints it recorded."""
    recorded = json.loads(marker.read_text())
    changed = sorted(key for key, digest in self._fingerprints(name).items()
                     if recorded.get(key, digest) != digest)  # older markers have none
    if changed:
      raise DamagedStage(f"{marker}: the files of stage {name} changed since it finished "
                         f"({', '.join(changed)} differ); delete the marker to redo the stage")
    return recorded

  def _check_without(self, name: str, recorded: dict[str, Any], marker: pathlib.Path) -> None:
    """A finished envs stage left out the families this run leaves out."""
    if name == "envs" and recorded.get("without", []) != list(self.without):
      raise DamagedStage(f"{marker}: stage envs was built --without {recorded.get('without', [])}"
                         f", this run asks --without {list(self.without)}: use another --out")

  def _say(self, text: str) -> None:
    if self.progress:
      print(text, file=sys.stderr, flush=True)

  # --- stages -----------------------------------------------------------------------------

  def _tokenizer(self) -> dict[str, Any]:
    docs = pretrain_text.documents(self.size.tokenizer_chars)
    tok = tokenizer_train.train(docs, self.cfg.vocab_size)
    tmp, final = self.stages / "tokenizer.tmp", self.stages / "tokenizer"
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer_train.save(tok, tmp)
    shutil.rmtree(final, ignore_errors=True)  # left by a run killed before its marker
    os.replace(tmp, final)
    return {"vocab_size": tok.get_vocab_size(), "chars": sum(map(len, docs))}

  def tokenizer(self):
    return load_tokenizer(self._tokenizer_dir())

  def _envs(self) -> dict[str, Any]:
    counts, words = {}, variants.action_words(self.tokenizer())
    families = [f for f in MINIGAME_FAMILIES if f not in self.without] if self.without else None
    for kind, count in (("variants", self.size.env_count),
                        ("minigames", self.size.minigame_count)):
      envs = variants.build_env_set(self.stages / ENV_FILES[kind], count=count, seed=self.seed,
                                    num_workers=self.experiment.sandbox.num_workers,
                                    progress=self.progress, kind=kind,
                                    categories=self.selfplay.skills, words=words,
                                    families=families if kind == "minigames" else None)
      counts[kind] = len(envs)
    return {"count": counts, "action_words": len(words), "without": list(self.without)}

  def _pretrain(self) -> dict[str, Any]:
    tok = self.tokenizer()
    cache = self.stages / "pretrain_tokens.npz"
    if not cache.is_file():
      docs = [tok.encode(d) for d in pretrain_text.documents(self.size.pretrain_chars)]
      windows = WindowPlan.from_documents(docs, tok.token_to_id(ENDOFTEXT), self.size.window,
                                          1).windows
      _save_npz(cache, windows=windows)
    mesh = self._mesh()
    rows = -(-self.size.pretrain_rows // batch_multiple(mesh)) * batch_multiple(mesh)
    plan = WindowPlan(np.load(cache)["windows"], rows, self.seed)
    model = random_model(self.cfg, seed=self.seed)
    circuit = copy_circuit.install(model, self.seed) if self.size.copy_circuit else None
    result = train("pretrain", model, plan, self.size.pretrain, self.stages / "pretrain", mesh,
                   progress=self.progress, deadline=self.deadline, probe=repeat_test)
    if not result["stopped_early"]:
      save_pretrained(model, self.stages / "pretrain_model")
    return {**result, "windows": int(plan.windows.shape[0]),
            "tokens_per_step": plan.tokens_per_step(), "copy_circuit": circuit,
            "copying": repeat_test(model)}

  def _sft(self) -> dict[str, Any]:
    examples, roles = self._examples()
    mesh = self._mesh()
    plan = BucketPlan.build(examples,
                            max_length=self.size.sft_max_length or self.cfg.max_position_embeddings,
                            tokens_per_step=self.size.sft_tokens_per_step,
                            multiple_of=batch_multiple(mesh), min_bucket=self.size.sft_min_bucket,
                            bucket_step=self.size.sft_bucket_step, seed=self.seed)
    steps = self.size.sft_epochs * plan.steps_per_epoch()
    stage = StageSettings(num_steps=steps, learning_rate=self.size.sft_learning_rate,
                          warmup_steps=max(1, steps // 20), save_every=max(1, steps // 10))
    model = from_pretrained(self._sft_base(), dtype="float32", compute_dtype=self.cfg.compute_dtype)
    result = train("sft", model, plan, stage, self.stages / "sft", mesh, progress=self.progress,
                   deadline=self.deadline, probe=repeat_test)
    if not result["stopped_early"]:
      save_pretrained(model, self.stages / "sft_model")
    return {**result, "copying": repeat_test(model), "examples": roles, "kept": len(plan.tokens),
            "batches": len(plan.batches)}

  def _sft_base(self) -> pathlib.Path:
    """The model the fine-tuning stage starts from."""
    return self.stages / "pretrain_model"

  def _examples(self) -> tuple[list[tuple[list[int], list[int]]], dict[str, int]]:
    """The fine-tuning rows (cached in sft_examples.jsonl: playing the agent's takes time)
    and their count by role."""
    cache = self.stages / "sft_examples.jsonl"
    if not cache.is_file():
      rows = self._example_rows()
      tmp = cache.with_suffix(".tmp")
      with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
          f.write(json.dumps(row) + "\n")
      os.replace(tmp, cache)
    examples, roles = [], {}
    for line in cache.read_text(encoding="utf-8").splitlines():
      row = json.loads(line)
      examples.append((row["tokens"], row["loss_mask"]))
      # A warm start's rows drawn from its build count as "rehearsal" too (warm.py).
      for key in (row["role"], "rehearsal") if row.get("rehearsal") else (row["role"],):
        roles[key] = roles.get(key, 0) + 1
    return examples, roles

  def _example_rows(self) -> list[dict[str, Any]]:
    """Designer, agent and copy examples as cache rows."""
    tok = self.tokenizer()
    seed_variants, games = (variants.load_env_set(self.stages / ENV_FILES[kind])
                            for kind in ("variants", "minigames"))
    pool = run.build_pool(self.experiment)
    try:
      rows = (sft_data.designer_examples(games, tok, self.selfplay, seed=self.seed,
                                         per_env=self.size.designer_per_env,
                                         max_chars=self.experiment.corpus.max_chars)
              + sft_data.agent_examples(seed_variants, tok, self.selfplay, pool,
                                        seed=self.seed, resets=self.size.variant_resets)
              + sft_data.agent_examples(games, tok, self.selfplay, pool, seed=self.seed,
                                        resets=self.size.minigame_resets)
              + sft_data.copy_examples(self.cfg.vocab_size, self.size.sft_copy_rows,
                                       seed=self.seed))
    finally:
      pool.close()
    return [cache_row(ex) for ex in rows]

  def _export(self) -> dict[str, Any]:
    model = from_pretrained(self.stages / "sft_model", dtype="float32")
    files = save_pretrained(model, self.out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
      shutil.copyfile(self._tokenizer_dir() / name, self.out / name)
    return {"files": files}

  def _tokenizer_dir(self) -> pathlib.Path:
    return self.stages / "tokenizer"

  def _mesh(self):
    return make_mesh(self.experiment.mesh_shape)


def cache_row(example: sft_data.SFTExample) -> dict[str, Any]:
  """An example as a line of sft_examples.jsonl."""
  return {"tokens": example.tokens, "loss_mask": example.loss_mask, "role": example.role}


def _save_npz(path: pathlib.Path, **arrays: np.ndarray) -> None:
  tmp = path.with_name(path.name + ".tmp.npz")
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def _sha256_files(paths) -> str:
  """One sha256 over the names and bytes of `paths` (files, in sorted order)."""
  digest = hashlib.sha256()
  for path in sorted(pathlib.Path(p) for p in paths):
    digest.update(path.name.encode() + b"\0" + path.read_bytes())
  return digest.hexdigest()


def _write_json(path: pathlib.Path, data: dict[str, Any]) -> None:
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(data, indent=1) + "\n")
  os.replace(tmp, path)
