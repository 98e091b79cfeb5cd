r"""The games setting scaled for a 2-core CPU, starting from the starter policy.

    python -m proj.starter build --out runs/starter          # the starter policy (< 60 min)
    python launch/tpu_run.py --config proj/starter/configs/starter.py --workdir runs/starter_loop
    # a starter built elsewhere:
    #   --config.model.checkpoint=DIR --config.tokenizer=DIR   (DIR = the build's --out)

The starter's fine-tuning examples are rendered from this config (`SelfPlayConfig`), so they
are exactly the prompts this run sends. Choices, and why:
* 6 environments a step, 2 of the 6 categories a refresh (3 each), k = 2: a CPU step must stay
  in minutes; k = 2 still delays the designer's update by a refresh.
* G = 4 episodes per arm: the smallest group whose advantages are not all +-1, and 6 x 2 x 4 =
  48 episodes fit one wave of 48 decode slots.
* the memory starts from minigames (../minigames.py: seven short template games, one a
  category and two for probing), which the starter learned to write by editing the one in its
  prompt; a seed game is about a thousand tokens, more than a model this small writes
  token-perfect.
* the compact designer prompt (no contract text: the starter learned the contract from its
  examples), memory sample size 1 and passages of 600 characters: the prompt is a passage, one
  minigame and the request, and a fine-tuning example is about a third as long as with the
  full prompt, which is what the build's fine-tuning pays for.
* designer replies up to 768 tokens (a minigame with its fence and hint is well under); agent
  replies up to 48 (one `<action>...</action>`, no reasoning: the starter never learned to
  think first); 6 turns an episode; 3,072 positions a conversation.
* designer temperature 0.3: a design is hundreds of tokens that must all be right, and at 0.7
  a small model's tail mass breaks most (bench/RESULTS_LOG.md, the starter's design experiments).
  The agent samples at 0.3 too; each role's may be set on its own (the trainer takes each
  row's log-probs at its role's temperature).
* a refresh short of valid designs is topped up from the memory (fill_from_memory), so that
  every step trains the agent while the designer's valid share is low.
* AdamW at 1e-5 with KL 0.01 to the starter: a small model fine-tuned on a narrow set moves
  fast, and the KL keeps the designer near the distribution that writes valid code.
"""

import pathlib

from ml_collections import ConfigDict

import proj.starter.registry  # noqa: F401 - the "starter" presets and the minigames library
from spade_jax.config_schema import base_config

# The build's --out: a Hugging Face directory with the model and its tokenizer.
STARTER_DIR = str(pathlib.Path(__file__).resolve().parents[3] / "runs" / "starter")


def get_config() -> ConfigDict:
  c = base_config()
  c.model.preset = "starter"  # 6 layers, width 256, the starter tokenizer's 12,288 pieces
  c.model.checkpoint = STARTER_DIR  # built by `python -m proj.starter build`
  c.tokenizer = STARTER_DIR  # the build writes tokenizer.json + chat template beside the weights
  c.mesh = {"data": 1, "fsdp": -1, "tensor": 1, "expert": 1}
  c.selfplay.num_envs = 6  # environments per step (3 per category)
  c.selfplay.k = 2  # refresh every 2 steps; designer update delayed by 2
  c.selfplay.group_size = 4  # G episodes per arm
  c.selfplay.categories_per_step = 2  # categories per refresh
  c.selfplay.max_turns = 6  # episode cap
  c.selfplay.memory.sample_size = 1  # one memory entry per designer prompt (prompt < 2.7k tokens)
  c.selfplay.library = "minigames"  # short generated games (../minigames.py) fill the memory
  c.selfplay.designer_prompt = "compact"  # no contract text (the starter learned it by example)
  c.selfplay.fill_from_memory = True  # a refresh short of valid designs replays memory games
  c.corpus.max_chars = 600  # short passages: the prompt fits beside a whole design
  c.sampling.designer = {"max_new_tokens": 768, "temperature": 0.3, "top_p": 1.0, "top_k": 0}
  c.sampling.agent = {"max_new_tokens": 48, "temperature": 0.3, "top_p": 1.0, "top_k": 0}
  c.engine.num_slots = 48  # 6 envs x 2 arms x G=4 episodes in one wave
  c.engine.max_cache_len = 3072  # a designer prompt + 768; an episode's 6 turns
  c.engine.prefill_buckets = (256, 1024, 2304)  # turns; first turns; designer prompt
  c.engine.decode_steps_per_poll = 16
  c.sandbox.num_workers = 2  # 2 cores
  c.rl.learning_rate = 1e-5  # GRPO from the starter
  c.rl.warmup_steps = 2
  c.rl.beta = 0.01  # KL to the starter (k3)
  c.rl.role_balance = True  # the designer's 6 rows a refresh against 48 episodes
  c.rl.designer_loss_share = 0.2
  c.rl.micro_batch_size = 4  # bounds the attention of ~4k-token designer rows
  c.train.num_steps = 40  # the learning run of issue 22
  c.train.checkpoint_every = 10
  c.eval.suites = ("seed_games_heldout",)  # held-out seed games, hint and no hint
  c.eval.every = 10
  c.eval.limit = 6
  c.eval.max_new_tokens = 48  # the agent's reply cap
  c.eval.temperature = 0.3  # as the agent acts (the suite's own is 1.0)
  c.eval.hold_out_seed_games = True
  return c
