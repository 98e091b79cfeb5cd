r"""Smoke run: the tiny model on CPU, a handful of environments, three steps, every stage.

    python launch/tpu_run.py --config configs/smoke.py --workdir runs/smoke   # = make smoke

Expected: under 10 minutes on a 2-core CPU machine, most of it compiling the engine's buckets
and the train step (bench/RESULTS.md has the measured wall time).

Every stage runs for real. The designer writes (a random model writes nothing valid, so the
validator rejects every design; `designer_advantage = "two_level"` still gives each invalid
design a row, at the invalid reward, so designer rows reach the update); the set is
topped up with replays from the library, which here is the dense-reward vowels environment
(`selfplay.library = "vowels"`, envs/vowels: reward = share of vowels in each answer) in
every skill; the agent's whole reply is its action (`action_format = "{}"`), so every episode
steps the environment in the sandbox and earns a varied return; advantages are non-zero,
so the update has a loss, and `rl.beta > 0` adds the KL to the reference (0 at step 1, when
policy and reference are equal; non-zero afterwards). With k=2 the set is refreshed at steps
1 and 3 and the designer samples of step 1 are trained at step 3 (the k-step delay), as are
those of step 3, the last step (no refresh's designs go untrained). A checkpoint is written
after every step.
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
  c.selfplay.fill_from_memory = True  # replay the library when the designs are invalid
  c.selfplay.library = "vowels"  # dense reward in every skill: varied returns from step 1
  c.selfplay.action_format = "{}"  # the whole reply is the action: every episode steps its env
  c.selfplay.memory.sample_size = 1  # one memory entry in the designer prompt (short prompt)
  # Not the paper's "discard" (the default): a random model writes no valid design, so
  # "discard" would leave the trainer's designer rows unexercised. "two_level" keeps a row per
  # invalid design (its group and validity term are the most code on that path); with every
  # design invalid their advantage is 0, as "penalty"'s would be.
  c.selfplay.designer_advantage = "two_level"
  c.sampling.designer = {"max_new_tokens": 64, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.sampling.agent = {"max_new_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.engine.num_slots = 8  # conversations decoded together
  c.engine.max_cache_len = 4096  # the tiny preset's max_position_embeddings
  c.engine.prefill_buckets = (256, 1024)  # longer prompts (the designer's) go in 1024 chunks
  c.engine.decode_steps_per_poll = 8  # decode steps between host checks
  # One slot count and one cache length below the full one: a smoke run is mostly compiling,
  # and each size pair compiles apart (bench/RESULTS.md, `make smoke`).
  c.engine.decode_widths = (8,)
  c.engine.decode_lengths = (1024,)
  c.sandbox.num_workers = 2  # this machine has 2 cores
  c.rl.learning_rate = 1e-3  # a random tiny model: large steps, so the KL shows by step 2
  c.rl.beta = 0.04  # KL to the frozen reference (k3): the reference forward runs too
  c.rl.micro_batch_size = 2  # bounds the [rows, heads, T, T] attention of ~3k-token designer rows
  c.rl.role_balance = True  # designer and agent shares of the loss set by the config
  c.corpus.max_chars = 400  # short passages keep the designer prompt inside the cache
  c.train.num_steps = 3  # steps of the run
  c.train.checkpoint_every = 1  # checkpoint every step (the resume test needs step 2)
  c.train.keep_checkpoints = 2  # newest two kept
  c.train.num_text_summaries = 2  # environments shown as text per step
  return c
