"""The composition root: `run(experiment, workdir)` builds every part of a run, resumes, loops.

Called by launch/tpu_run.py with the typed `Experiment` that `config_schema.validate`
returned, after `jax.distributed` is initialised and the mesh built (or builds the mesh
itself). Builds, in order: the policy
(preset + optional checkpoint), the tokenizer, the trainer (restoring the newest checkpoint
of <workdir>/checkpoints: params, optimiser state, RNG and the loop's host state), the
engine on the trainer's live parameters, the sandbox pool, the corpus, the seed library,
the loop and the metrics logger. Then it runs steps until experiment.train.num_steps,
checkpointing through the trainer, and always closes the sandbox workers. A SIGTERM or a
preemption notice stops it at the next step boundary, saved (spade_jax/preemption.py).

Every host runs the same loop on the same data: rollouts are global SPMD computations on
the mesh, so the designer prompts (hence the corpus stream) must be identical on all hosts.
The sandbox work is not repeated on every host: `SplitPool` runs each process's share of
every validation, reset and step and exchanges the results (`multihost.JaxExchange`), so
every host still sees every episode and builds the same batch.
"""

from __future__ import annotations

import os
import sys

import jax
from flax import nnx

from spade_jax import storage
from spade_jax.checks import ConfigError
from spade_jax.engine.api import SamplingParams
from spade_jax.engine.config import EngineConfig
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.eval.config import EvalConfig
from spade_jax.eval.evaluate import SuiteRequest, evaluate
from spade_jax.eval.generate import Generator
from spade_jax.experiment import Experiment
from spade_jax.metrics.logger import StepLogger, no_update_line
from spade_jax.model import Qwen3, create_sharded, load_model, make_mesh
from spade_jax.model.attention_impl import resolve_attention_impl
from spade_jax.model.load import RUN_CONFIG_FILE
from spade_jax.model.lora_io import with_adapters
from spade_jax.model.policy_config import PolicyConfig
from spade_jax.multihost import JaxExchange, PeerLost, lost_peer
from spade_jax.preemption import Preempted, StopRequests
from spade_jax.rl.trainer import Trainer
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.sandbox.split import LocalExchange, SplitPool
from spade_jax.selfplay.corpus import make_corpus
from spade_jax.selfplay.loop import SelfPlayLoop
from spade_jax.selfplay.record import StepRecord
from spade_jax.selfplay.seed_envs import seed_entries
from spade_jax.tokenizer import load_tokenizer


def build_model(policy: PolicyConfig, seed: int, mesh):
  """The policy: the preset at random init (seeded), or the checkpoint's weights, with the
  config's compute dtype, attention kernel and remat policy. An attention kernel the
  platform lacks fails here, before anything compiles."""
  static = policy.run_fields()  # static in the module graph
  resolve_attention_impl(static["attention_impl"], static["compute_dtype"])
  if not policy.checkpoint:
    cfg = policy.architecture()
    return create_sharded(lambda: Qwen3(cfg, rngs=nnx.Rngs(seed)), mesh)
  model = load_model(policy.checkpoint, dtype=policy.param_dtype, mesh=mesh)
  cfg = model.cfg.replace(**static)
  if cfg == model.cfg:
    return model
  if cfg.lora_rank:  # fresh adapters on the loaded base (the same as at random init)
    return with_adapters(model, cfg, seed, mesh)
  # Re-merge the loaded weights into a graph built for the requested static settings (no
  # copy of the parameters).
  graphdef = nnx.split(nnx.eval_shape(lambda: Qwen3(cfg, rngs=nnx.Rngs(0))))[0]
  return nnx.merge(graphdef, nnx.state(model))


def build_engine(engine: EngineConfig, policy, mesh) -> SlotConversationEngine:
  """The rollout engine on `policy` with config.engine's capacity."""
  return SlotConversationEngine(
      policy, num_slots=engine.num_slots, max_cache_len=engine.max_cache_len,
      prefill_buckets=engine.prefill_buckets,
      decode_steps_per_poll=engine.decode_steps_per_poll, mesh=mesh,
      decode_widths=engine.decode_widths, decode_lengths=engine.decode_lengths,
      append_lengths=engine.append_lengths, prefill_tokens=engine.prefill_tokens,
      replica_chips=engine.replica_chips)


def build_pool(experiment: Experiment) -> SplitPool:
  """This process's sandbox pool, taking its share of the work when there are several."""
  exchange = JaxExchange() if jax.process_count() > 1 else LocalExchange()
  return SplitPool(_sandbox_pool(experiment), exchange)


def _sandbox_pool(experiment: Experiment) -> SandboxPool:
  sb = experiment.sandbox
  return SandboxPool(num_workers=sb.num_workers, max_turns=experiment.selfplay.max_turns,
                     reset_timeout_s=sb.reset_timeout_s, step_timeout_s=sb.step_timeout_s,
                     memory_mb=sb.memory_mb, isolation=sb.isolation,
                     require_tools=experiment.selfplay.setting == "tool_use",
                     require_oracle=sb.require_oracle, episodes_memory_mb=sb.episodes_memory_mb)


def run_evaluation(evals: EvalConfig, engine, pool, tokenizer, max_cache_len: int,
                   workdir: str, step: int) -> dict[str, float]:
  """The held-out suites on the engine's current weights: eval/<suite>/<metric> scalars."""
  generator = Generator(engine, tokenizer, SamplingParams(max_new_tokens=1, seed=step),
                        max_cache_len, progress=False)
  requests = [SuiteRequest(name, limit=evals.limit, samples=evals.samples)
              for name in evals.suites]
  # Every host generates (rollouts are SPMD); only the chief writes the records.
  out = (storage.join(workdir, "eval", f"step_{step}.jsonl") if jax.process_index() == 0
         else None)
  summaries = evaluate(requests, generator, pool, out, max_new_tokens=evals.max_new_tokens,
                       temperature=evals.temperature)
  scalars = {}
  for s in summaries.values():
    scalars[f"eval/{s.suite}/{s.metric}"] = s.value
    scalars.update({f"eval/{s.suite}/{k}": float(v) for k, v in s.extra.items()})
  return scalars


def save_config(experiment: Experiment, workdir: str) -> None:
  """<workdir>/config.json: the run's whole config (`eval run` on the workdir reads the
  tokenizer from it). Written atomically (`storage.write_text`): a reader never sees half."""
  storage.write_text(storage.join(workdir, RUN_CONFIG_FILE), experiment.source + "\n")


def build_trainer(experiment: Experiment, model, mesh, workdir: str) -> Trainer:
  """The trainer of `model`, checkpointing under <workdir>/checkpoints."""
  train, policy = experiment.train, experiment.model
  return Trainer.for_run(experiment.rl, model, mesh, workdir, seed=experiment.seed,
                         save_every=train.checkpoint_every, keep=train.keep_checkpoints,
                         checkpoint=policy.checkpoint, preset=policy.preset)


def run(experiment: Experiment, workdir: str | os.PathLike, mesh=None) -> StepRecord | None:
  """Trains until experiment.train.num_steps; returns the last step's record (None if none
  ran).

  `experiment` is `config_schema.validate(config)`'s. `mesh` defaults to
  `make_mesh(experiment.mesh_shape)`. `workdir` is a local directory or a gs:// URL
  (spade_jax/storage.py); one that cannot be written fails first (StorageError).
  """
  workdir = os.fspath(workdir)
  storage.check_writable(workdir)
  if jax.process_index() == 0:
    save_config(experiment, workdir)
  selfplay, evals, train = experiment.selfplay, experiment.eval, experiment.train
  mesh = make_mesh(experiment.mesh_shape) if mesh is None else mesh
  try:
    tokenizer = load_tokenizer(experiment.tokenizer)
  except OSError as err:  # missing files, a hub id that cannot be fetched: one line
    raise ConfigError(f"config.tokenizer={experiment.tokenizer!r}: "
                      f"{str(err).strip().splitlines()[0]}") from None
  trainer = build_trainer(experiment, build_model(experiment.model, experiment.seed, mesh),
                          mesh, workdir)
  host_state = trainer.restore()
  # From here on a SIGTERM / preemption notice stops the run at a step boundary.
  stop_requests = StopRequests(start_step=int((host_state or {}).get("steps_done", 0)))
  engine = build_engine(experiment.engine, trainer.policy, mesh)
  engine.load_weights(trainer.params)
  corpus = make_corpus(experiment.corpus, shard=(0, 1)) if selfplay.use_corpus else None
  pool = build_pool(experiment)
  logger = None
  try:
    loop = SelfPlayLoop(selfplay, engine=engine, pool=pool, tokenizer=tokenizer,
                        trainer=trainer, corpus=corpus,
                        seed_envs=seed_entries(selfplay, "train" if evals.hold_out_seed_games
                                             else "all"))
    num_steps, log_every = train.num_steps, train.log_every
    logger = StepLogger(workdir, num_steps, num_text_summaries=train.num_text_summaries,
                        embedder=experiment.metrics.embedder(),
                        is_chief=jax.process_index() == 0)
    if host_state:
      loop.load_state_dict(host_state)
      logger.load_state_dict(host_state.get("logger", {}))
    print(f"self-play: starting at step {loop.steps_done + 1} of {num_steps} "
          f"(memory {len(loop.memory)} environments)", flush=True)
    record = None
    while loop.steps_done < num_steps:
      record = loop.step(final=loop.steps_done + 1 == num_steps)  # last: train pending designs
      logger.observe(record)  # the windowed learnable share counts every step
      stop = stop_requests.reached(record.step)  # the same answer on every process
      if not record.train_metrics:  # no episode trainable and no designer sample came due
        print(no_update_line(record), flush=True)
      else:
        if record.step % log_every == 0 or record.step == num_steps or stop:
          logger.write(record)
        if evals.due(record.step):
          logger.write_scalars(run_evaluation(evals, engine, pool, tokenizer,
                                              experiment.engine.max_cache_len, workdir,
                                              record.step), record.step)
      if record.train_metrics or (stop and trainer.updates not in trainer.checkpoints.all_steps()):
        # Checkpoints are named by the trainer's update count (== step unless a step had no
        # update); the loop's own step is in the host state.
        trainer.maybe_save({**loop.state_dict(), "logger": logger.state_dict()},
                           force=record.step == num_steps or stop)
      if stop and loop.steps_done < num_steps:
        raise Preempted(stop_requests.notice, record.step,
                        f"{trainer.checkpoints.directory}/{trainer.updates}")
    return record
  except Exception as err:  # a collective that failed because a process died reads as such
    lost = lost_peer(err, getattr(pool.exchange, "peers", None))
    if lost is None:
      raise
    raise lost from None
  finally:
    stop_requests.close()
    ended = sys.exc_info()[1]
    if hasattr(pool.exchange, "close"):  # the others must not take a proper end for a loss
      pool.exchange.close(finished=ended is None or isinstance(ended, Preempted))
    print(f"process {jax.process_index()}/{jax.process_count()}: this process's sandbox ran "
          f"{dict(sorted(pool.local_counts.items()))}", flush=True)
    pool.close()
    if not isinstance(ended, PeerLost):  # pending saves wait for every process
      trainer.close()
    if logger is not None:
      logger.close()
