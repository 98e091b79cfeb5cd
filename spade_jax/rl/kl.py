"""Per-token estimators of KL(policy || reference) from sampled tokens' log-probs.

With x = log pi_ref(a) - log pi(a) for a token a sampled from the policy (Schulman's
"Approximating KL divergence"):
  k1 = -x                unbiased, high variance, can be negative;
  k2 = x^2 / 2           biased, low variance, >= 0;
  k3 = exp(x) - x - 1    unbiased, low variance, >= 0.
k3's exp overflows when the reference is far more likely than the policy; x is clamped
to +-KL_LOG_RATIO_BOUND (e^20 ~ 5e8 stays finite in float32 and bfloat16, whose
largest finite value is ~3.4e38, and keeps the gradient bounded) and the estimate is
computed in float32 whatever the inputs' dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

KL_LOG_RATIO_BOUND = 20.0


def _log_ratio(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
  x = ref_logp.astype(jnp.float32) - logp.astype(jnp.float32)
  return jnp.clip(x, -KL_LOG_RATIO_BOUND, KL_LOG_RATIO_BOUND)


def k1(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
  return -_log_ratio(logp, ref_logp)


def k2(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
  return 0.5 * jnp.square(_log_ratio(logp, ref_logp))


def k3(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
  x = _log_ratio(logp, ref_logp)
  return jnp.expm1(x) - x  # expm1 keeps precision for small x


# name -> f(logp [..], ref_logp [..]) -> per-token estimate [..] float32
KL_ESTIMATORS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "k1": k1, "k2": k2, "k3": k3}
