"""GRPO for SPADE: advantages, losses, the jitted sharded update, the Trainer, checkpoints.

See docs/rl.md for the loss, the masks, the roles, the registries and the checkpoint layout.
"""

from spade_jax.rl.advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from spade_jax.rl.aggregation import AGGREGATIONS, token_weights
from spade_jax.rl.batch import AGENT, DESIGNER, TrainBatch
from spade_jax.rl.checkpoint import CheckpointManager
from spade_jax.rl.config import RLConfig
from spade_jax.rl.kl import KL_ESTIMATORS
from spade_jax.rl.trainer import Trainer

__all__ = [
    "ADVANTAGE_ESTIMATORS", "AGENT", "AGGREGATIONS", "CheckpointManager", "DESIGNER",
    "KL_ESTIMATORS", "RLConfig", "TrainBatch", "Trainer", "compute_advantages", "token_weights",
]
