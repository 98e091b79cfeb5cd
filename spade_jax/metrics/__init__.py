"""spade_jax.metrics: curriculum metrics, TensorBoard summaries and the per-step console line."""

from spade_jax.metrics.logger import StepLogger
from spade_jax.metrics.step_scalars import step_metrics
from spade_jax.metrics.vendi import vendi_per_n

__all__ = ["StepLogger", "step_metrics", "vendi_per_n"]
