r"""Smoke run: the tiny model on CPU, a handful of environments, three steps, every stage.

    python launch/tpu_run.py --config configs/smoke.py --workdir runs/smoke   # = make smoke

Expected: under 10 minutes on a 2-core CPU machine including compilation (measured
figures: bench/RESULTS.md). Most of it is compiling the engine's buckets and the train
step.

A randomly initialised tiny model writes almost no valid environment, so `fill_from_memory`
tops each set up with seed-library replays; the log says per step how many environments were
designed and replayed. With k=2 the set is refreshed at steps 1 and 3 and the designer
samples of step 1 are trained at step 3 (the k-step delay). A checkpoint is written after
every step.
"""

from ml_collections import ConfigDict

from spade_jax.config_schema import base_config


def get_config() -> ConfigDict:
  c = base_config()
  c.model.preset = "tiny"  # 2 layers, width 64, vocab 1024 (the bundled tokenizer's)
  c.model.checkpoint = ""  # random init: nothing to download
  c.tokenizer = "tiny"  # bundled SentencePiece tokenizer
  c.mesh = {"data": 1, "fsdp": 1, "tensor": 1, "expert": 1}  # one CPU device
  c.selfplay.num_envs = 4  # environments per step
  c.selfplay.k = 2  # refresh at steps 1, 3, ...; designer update delayed by 2 steps
  c.selfplay.group_size = 2  # G: smallest group with a defined advantage
  c.selfplay.categories_per_step = 2  # categories drawn per refresh
  c.selfplay.max_turns = 3  # short episodes
  c.selfplay.fill_from_memory = True  # replay seeds when the designer's outputs are invalid
  c.selfplay.memory.sample_size = 1  # one memory entry in the designer prompt (short prompt)
  c.sampling.designer = {"max_new_tokens": 64, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.sampling.agent = {"max_new_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.engine.num_slots = 8  # conversations decoded together
  c.engine.max_cache_len = 4096  # the tiny preset's max_position_embeddings
  c.engine.prefill_buckets = (256, 1024)  # longer prompts (the designer's) go in 1024 chunks
  c.engine.decode_steps_per_poll = 8  # decode steps between host checks
  c.sandbox.num_workers = 2  # this machine has 2 cores
  c.rl.learning_rate = 1e-5  # visible change in three steps
  c.rl.micro_batch_size = 2  # bounds the [rows, heads, T, T] attention of ~3k-token designer rows
  c.rl.total_steps = 3  # schedule horizon = the run
  c.corpus.max_chars = 400  # short passages keep the designer prompt inside the cache
  c.train.num_steps = 3  # steps of the run
  c.train.checkpoint_every = 1  # checkpoint every step (the resume test needs step 2)
  c.train.keep_checkpoints = 2  # newest two kept
  c.train.num_text_summaries = 2  # environments shown as text per step
  return c
