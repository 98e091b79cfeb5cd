r"""SPADE games setting with LoRA on Qwen3-4B, sized for a v5e-8 (8 chips of 16 GiB).

    python launch/tpu_run.py --config games_lora.py --workdir gs://BUCKET/spade/games_lora \
        --config.model.checkpoint=/path/to/Qwen3-4B-Instruct-2507 \
        --config.tokenizer=/path/to/Qwen3-4B-Instruct-2507
    python -m spade_jax.plan --config games_lora.py --topology v5e-8 --compile   # the fit

The games run (configs/games.py) with only rank-16 adapters training on every attention and
MLP projection: the frozen base is stored in bfloat16, Adam state and gradients are the
adapters' (about 1 % of the weights), and the KL reference is the base with the adapters
off, so there is no second copy. Rows are cut to 8,192 tokens and the engine to 32 slots so
that one row's attention and the KV cache fit next to the weights, and the largest prefill
piece is 2,048 tokens (a ~4k designer prompt goes in two appends of 4 rows: games.py's
8,192 tokens a prefill call). Expected runtime: not
measured here (no TPU run was made). Export the result with
`python -m spade_jax.export --workdir W --adapter OUT` (a PEFT adapter) or `--merged OUT`.
"""

from ml_collections import ConfigDict

from spade_jax.config_schema import config_of

CHECKPOINT = "/mnt/disks/models/Qwen3-4B-Instruct-2507"  # HF dir (config.json, *.safetensors)


def get_config() -> ConfigDict:
  c = config_of("games.py")
  c.model.preset = "qwen3-4b"
  c.model.checkpoint = CHECKPOINT
  c.tokenizer = CHECKPOINT
  c.model.param_dtype = "bfloat16"  # frozen base (and adapters) in bf16: 1 GiB a chip
  c.model.remat = "full"  # recompute each layer: one layer's activations live at a time
  c.model.lora_rank = 16  # adapters on q/k/v/o and gate/up/down (lora_targets default)
  c.model.lora_alpha = 32.0  # update scale alpha / rank = 2
  c.rl.learning_rate = 1e-5  # adapters take a larger step than full weights (1e-6)
  c.rl.logprob_remat = True  # one chunk of [T, V] logits live, not the whole row's
  c.rl.micro_batch_size = 8  # one row a chip per micro-batch
  c.engine.num_slots = 32  # 384 episodes in 12 waves; the KV cache is ~1/3 of HBM
  c.engine.max_cache_len = 8192  # designer prompt (~4k) + 2k reply; agent 8 turns of 512
  c.engine.prefill_buckets = (512, 2048)  # turns; prompts in pieces of at most 2k
  c.engine.replica_chips = 0  # one copy over the v5e-8's 8 chips (one host), not two of 4
  c.sampling.designer = {"max_new_tokens": 2048, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.sampling.agent = {"max_new_tokens": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  return c
