r"""SPADE games setting (the paper's main run): Qwen3-30B-A3B, 400 steps of 24 environments.

    python launch/tpu_run.py --config games.py --workdir gs://BUCKET/spade/games \
        --config.model.checkpoint=/path/to/Qwen3-30B-A3B-Instruct-2507 \
        --config.tokenizer=/path/to/Qwen3-30B-A3B-Instruct-2507

Each step plays 24 designer-written games covering three of six skill categories; the set is
regenerated every k=4 steps and the designer's update is delayed by the same k (paper,
"Experimental Setup"). Expected runtime: not measured here (no TPU run was made); budget
several days on a v5p-64 slice for 400 steps at these lengths. Smaller backbones:
--config.model.preset=qwen3-4b or qwen3-8b with the matching checkpoint.
"""

from ml_collections import ConfigDict

from spade_jax.config_schema import base_config

CHECKPOINT = "/mnt/disks/models/Qwen3-30B-A3B-Instruct-2507"  # HF dir (config.json, *.safetensors)


def get_config() -> ConfigDict:
  c = base_config()
  c.model.preset = "qwen3-30b-a3b"  # the paper's largest backbone (Qwen3-30B-A3B-Instruct-2507)
  c.model.checkpoint = CHECKPOINT  # Hugging Face weights to start from
  c.model.param_dtype = "float32"  # master weights and Adam moments
  c.model.compute_dtype = "bfloat16"  # TPU matmuls
  c.tokenizer = CHECKPOINT  # tokenizer.json + chat template ship with the checkpoint
  c.mesh = {"data": 1, "fsdp": -1, "tensor": 1, "expert": 1}  # FSDP over the whole slice
  c.selfplay.num_envs = 24  # paper: 24 environments per rollout
  c.selfplay.k = 4  # paper: refresh every 4 rollouts, designer update delayed by 4
  c.selfplay.group_size = 8  # G episodes per arm (not given in the paper)
  c.selfplay.categories_per_step = 3  # paper: three of the six skill categories per rollout
  c.selfplay.max_turns = 8  # episode cap (environments may set fewer)
  c.sampling.designer = {"max_new_tokens": 4096, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.sampling.agent = {"max_new_tokens": 1024, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.engine.num_slots = 256  # 24 envs x 2 arms x G=8 = 384 episodes run in 1.5 waves
  c.engine.max_cache_len = 12288  # system prompt + 8 turns of observation and 1024-token reply
  c.engine.prefill_buckets = (512, 2048, 4096)  # turns; first turns; designer prompt (~4k)
  c.engine.decode_steps_per_poll = 32  # fewer host round trips on TPU
  # A handful of engine programs (each a whole-model compile): one decode capacity, all slots
  # x the whole cache, never resized (TPU's decode kernel reads each slot's live entries
  # only); appends read 4k, 8k or all entries, and hold 8,192 tokens a call (512-token turns
  # 16 rows, 2k prompts 4, designer 4k pieces 2), so each prefill bucket compiles once per
  # read length: 3 x 3 appends + 1 decode block (tests/engine/test_engine_programs.py).
  c.engine.decode_widths = ()
  c.engine.decode_lengths = ()
  c.engine.append_lengths = (4096, 8192)
  c.engine.prefill_tokens = 8192
  # A copy of the weights per 4 chips (a v5p host's), each serving its share of the slots: a
  # decode step's collectives stay within 4 chips instead of all 32 of a v5p-64.
  c.engine.replica_chips = 4
  c.sandbox.num_workers = 64  # environment processes per host
  c.rl.learning_rate = 1e-6  # GRPO on a 30B-A3B instruct model
  c.rl.warmup_steps = 10  # short warmup
  c.rl.schedule = "constant"  # flat after warmup
  c.rl.beta = 0.01  # KL to the initial policy (k3 estimator): the paper's regularised GRPO
  c.rl.kl_estimator = "k3"  # unbiased, non-negative, low variance; beta = 0 turns KL off
  c.rl.role_balance = True  # designer / agent shares of the loss set here, not by token counts
  # A fifth: at most 24 designer rows a refresh (valid designs only, "discard") beside the 192
  # no-hint episodes trained each step (384 are played; the hint arm only measures regret).
  c.rl.designer_loss_share = 0.2
  c.rl.micro_batch_size = 32  # rows per accumulation micro-batch
  c.corpus.paths = ()  # built-in science-docs corpus (the paper's is a 15k-document collection)
  c.train.num_steps = 400  # paper: 400 rollouts
  c.train.checkpoint_every = 16  # about every 30-60 minutes
  c.train.keep_checkpoints = 3  # newest three kept
  c.eval.suites = ("reasoning_gym", "humaneval", "seed_games_heldout")  # offline suites
  c.eval.every = 16  # with each checkpoint
  c.eval.limit = 64  # first items of each suite
  c.eval.hold_out_seed_games = True  # seed_games_heldout stays out of memory and replays
  return c
