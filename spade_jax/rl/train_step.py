"""The pure GRPO update: micro-batched gradients, clipping and AdamW in one jitted call.

`train_step(params, opt_state, ref_params, rest, batch, *, graphdef, tx, cfg)` is a
top-level function over pytrees: the Trainer closes over the static arguments, jits it
with explicit in/out shardings (taken from the model's parameter shardings) and donates
`params` and `opt_state`, so the update happens in place.

`batch` holds device arrays with a leading micro-batch axis M:
  tokens, attention_mask      [M, mb, T] int32
  loss_mask, behaviour_logprobs, weights  [M, mb, T] float32 (weights: aggregation.py)
  advantages                  [M, mb] float32
  positions (optional)        [M, mb, L] int32: where logits are needed (step_inputs.py)
Micro-batches run in a `lax.scan` that sums gradients; because the token weights are
normalised over the whole batch, the sum is exactly the full-batch gradient.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from spade_jax.rl.config import RLConfig
from spade_jax.rl.losses import grpo_token_loss, token_logprobs

# Metrics summed over micro-batches; `_finalise` turns them into means.
_SUM_KEYS = ("loss", "loss_tokens", "kl_sum", "entropy_sum", "clipped_sum", "gap_sum",
             "ratio_sum", "truncated_sum")
_MAX_KEYS = ("gap_max", "ratio_max")  # maxima over micro-batches


def _micro_loss(params, ref_logp, rest, mb: dict[str, jax.Array], *, graphdef,
                cfg: RLConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Weighted loss of one micro-batch (already normalised over the full batch)."""
  model = nnx.merge(graphdef, params, rest)
  logp, entropy = token_logprobs(model, mb["tokens"], mb["attention_mask"],
                                 chunk=cfg.logprob_chunk, temperature=cfg.temperature,
                                 remat=cfg.logprob_remat, positions=mb.get("positions"))
  per_token, terms = grpo_token_loss(logp, mb["behaviour_logprobs"], ref_logp,
                                     mb["advantages"], mb["loss_mask"], cfg)
  mask = mb["loss_mask"] > 0
  loss = jnp.sum(mb["weights"] * per_token)
  gap, ratio = jax.lax.stop_gradient(terms["gap"]), terms["ratio"]
  sums = {
      "loss": loss,
      "loss_tokens": jnp.sum(mask.astype(jnp.float32)),
      "kl_sum": jnp.sum(terms["kl"]),
      "entropy_sum": jnp.sum(jnp.where(mask, entropy, 0.0)),
      "clipped_sum": jnp.sum(terms["clipped"]),
      "gap_sum": jnp.sum(gap),
      "gap_max": jnp.max(gap),
      "ratio_sum": jnp.sum(ratio),
      "ratio_max": jnp.max(ratio),
      "truncated_sum": jnp.sum(terms["truncated"]),
  }
  return loss, jax.tree.map(jax.lax.stop_gradient, sums)


def reference_logprobs(ref_params, rest, mb: dict[str, jax.Array], *, graphdef,
                       cfg: RLConfig) -> jax.Array:
  """Log-probs [mb, T] of the frozen reference policy (no gradient)."""
  model = nnx.merge(graphdef, ref_params, rest)
  logp, _ = token_logprobs(model, mb["tokens"], mb["attention_mask"],
                           chunk=cfg.logprob_chunk, temperature=cfg.temperature,
                           positions=mb.get("positions"))
  return jax.lax.stop_gradient(logp)


def train_step(params, opt_state, ref_params, rest, batch: dict[str, jax.Array], *,
               graphdef, tx: optax.GradientTransformation, cfg: RLConfig,
               ) -> tuple[Any, Any, dict[str, jax.Array]]:
  """One optimiser update over all micro-batches; returns new params, state, metrics."""

  def body(carry, mb):
    grads, sums = carry
    # ref_params None (LoRA): the reference is the base, i.e. the adapters set to zero.
    ref = jax.tree.map(jnp.zeros_like, params) if ref_params is None else ref_params
    ref_logp = (reference_logprobs(ref, rest, mb, graphdef=graphdef, cfg=cfg)
                if cfg.beta > 0 else None)
    (_, mb_sums), mb_grads = jax.value_and_grad(_micro_loss, has_aux=True)(
        params, ref_logp, rest, mb, graphdef=graphdef, cfg=cfg)
    grads = jax.tree.map(jnp.add, grads, mb_grads)
    sums = {k: (jnp.maximum(sums[k], v) if k in _MAX_KEYS else sums[k] + v)
            for k, v in mb_sums.items()}
    return (grads, sums), None

  zeros = jax.tree.map(jnp.zeros_like, params)
  init_sums = {k: jnp.zeros((), jnp.float32) for k in (*_SUM_KEYS, *_MAX_KEYS)}
  (grads, sums), _ = jax.lax.scan(body, (zeros, init_sums), batch)
  grad_norm = optax.tree.norm(grads)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state, _finalise(sums, grad_norm)


def _finalise(sums: dict[str, jax.Array], grad_norm: jax.Array) -> dict[str, jax.Array]:
  tokens = jnp.maximum(sums["loss_tokens"], 1.0)
  return {
      "loss": sums["loss"],
      "kl": sums["kl_sum"] / tokens,
      "entropy": sums["entropy_sum"] / tokens,
      "clip_fraction": sums["clipped_sum"] / tokens,
      "logprob_gap_mean": sums["gap_sum"] / tokens,
      "logprob_gap_max": sums["gap_max"],
      # pi_train / pi_rollout on loss tokens, and the share truncated at tis_cap.
      "importance_ratio_mean": sums["ratio_sum"] / tokens,
      "importance_ratio_max": sums["ratio_max"],
      "tis_truncated_fraction": sums["truncated_sum"] / tokens,
      "grad_norm": grad_norm,
      "loss_tokens": sums["loss_tokens"],
  }
