r"""SPADE games setting on Qwen3-8B with full fine-tuning, sized for a v5p-8 (4 chips of 95 GiB).

    python launch/tpu_run.py --config games_8b.py --workdir gs://BUCKET/spade/games_8b \
        --config.model.checkpoint=/path/to/Qwen3-8B --config.tokenizer=/path/to/Qwen3-8B
    python -m spade_jax.plan --config games_8b.py --topology v5p-8 --compile   # the fit

The games run (configs/games.py: 24 environments, three of six categories, k = 4, G = 8,
12,288-token episodes) on the 8B dense backbone, every weight trained: float32 master
weights and Adam moments, a float32 KL reference, FSDP over the slice's four chips. What gave
way to fit next to the float32 training state: each layer is rematerialised
(`model.remat`), the log-prob chunks too (`rl.logprob_remat`), the micro-batch is one row a
chip, and the engine keeps 32 slots (384 episodes in 12 waves) so that its KV cache stays near
a fifth of HBM. Expected runtime: not measured (no TPU run was made).
"""

from ml_collections import ConfigDict

from spade_jax.config_schema import config_of

CHECKPOINT = "/mnt/disks/models/Qwen3-8B"  # HF dir (config.json, *.safetensors)


def get_config() -> ConfigDict:
  c = config_of("games.py")
  c.model.preset = "qwen3-8b"
  c.model.checkpoint = CHECKPOINT
  c.tokenizer = CHECKPOINT
  c.model.remat = "full"  # recompute each layer: one layer's activations live at a time
  c.rl.logprob_remat = True  # one chunk of [T, V] logits live, not the whole row's
  c.rl.micro_batch_size = 4  # one row a chip per micro-batch
  c.engine.num_slots = 32  # 384 episodes in 12 waves
  return c
