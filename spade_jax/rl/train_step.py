"""The pure GRPO update: micro-batched gradients, clipping and AdamW in one jitted call.

`train_step(params, opt_state, ref_params, rest, batch, *, graphdef, tx, cfg)` is a
top-level function over pytrees: the Trainer closes over the static arguments, jits it
with explicit in/out shardings (taken from the model's parameter shardings) and donates
`params` and `opt_state`, so the update happens in place.

`batch` holds device arrays with a leading micro-batch axis M:
  tokens, attention_mask      [M, mb, T] int32
  loss_mask, behaviour_logprobs, weights  [M, mb, T] float32 (weights: aggregation.py)
  advantages                  [M, mb] float32
  roles (optional)            [M, mb] int32: AGENT / DESIGNER (absent: every row the agent's);
                              a row's logits are divided by its role's sampling temperature
  positions (optional)        [M, mb, L] int32: where logits are needed (step_inputs.py)
Micro-batches run in a `lax.scan` that sums gradients; because the token weights are
normalised over the whole batch, the sum is exactly the full-batch gradient.

Metrics are pooled over both roles and also split per role ("agent/...", "designer/..."):
designer rows carry behaviour log-probs from k updates back, so their ratio and gap measure
staleness, the agent's measure the engine/trainer mismatch. With `tis_cap > 0` only agent
rows get truncated importance sampling; designer rows keep the clipped ratio (docs/rl.md).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from spade_jax.rl.advantages import ROLE_NAMES
from spade_jax.rl.batch import AGENT, DESIGNER
from spade_jax.rl.config import RLConfig
from spade_jax.rl.losses import grpo_token_loss, token_logprobs

# Per-token terms summed (and maximised) over loss tokens, pooled and per role.
_TERM_SUMS = ("kl", "clipped", "gap", "ratio", "truncated")
_TERM_MAXES = ("gap", "ratio")
_PREFIXES = ("", *(f"{name}/" for name in ROLE_NAMES.values()))
# Metrics summed over micro-batches; `_finalise` turns them into means. "*_max": maxima.
_SUM_KEYS = ("loss", "entropy_sum", *(f"{p}{k}" for p in _PREFIXES
                                      for k in ("loss_tokens", *(f"{t}_sum" for t in _TERM_SUMS))))
_MAX_KEYS = tuple(f"{p}{t}_max" for p in _PREFIXES for t in _TERM_MAXES)


def _micro_loss(params, ref_logp, rest, mb: dict[str, jax.Array], *, graphdef,
                cfg: RLConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Weighted loss of one micro-batch (already normalised over the full batch)."""
  model = nnx.merge(graphdef, params, rest)
  roles = _roles(mb)
  logp, entropy = token_logprobs(model, mb["tokens"], mb["attention_mask"],
                                 chunk=cfg.logprob_chunk, temperature=row_temperatures(roles, cfg),
                                 remat=cfg.logprob_remat, positions=mb.get("positions"))
  mask = mb["loss_mask"] > 0  # [mb, T]
  per_token, terms = grpo_token_loss(logp, mb["behaviour_logprobs"], ref_logp,
                                     mb["advantages"], mb["loss_mask"], cfg,
                                     tis_rows=roles == AGENT)
  loss = jnp.sum(mb["weights"] * per_token)
  terms = jax.tree.map(jax.lax.stop_gradient, terms)  # zero off the loss mask
  sums = {"loss": loss, "entropy_sum": jnp.sum(jnp.where(mask, entropy, 0.0))}
  selections = {"": mask, **{f"{name}/": mask & (roles == role)[:, None]
                             for role, name in ROLE_NAMES.items()}}
  for prefix, sel in selections.items():
    sums[f"{prefix}loss_tokens"] = jnp.sum(sel.astype(jnp.float32))
    for t in _TERM_SUMS:
      sums[f"{prefix}{t}_sum"] = jnp.sum(jnp.where(sel, terms[t], 0.0))
    for t in _TERM_MAXES:
      sums[f"{prefix}{t}_max"] = jnp.max(jnp.where(sel, terms[t], 0.0))
  return loss, jax.tree.map(jax.lax.stop_gradient, sums)


def reference_logprobs(ref_params, rest, mb: dict[str, jax.Array], *, graphdef,
                       cfg: RLConfig) -> jax.Array:
  """Log-probs [mb, T] of the frozen reference policy (no gradient)."""
  model = nnx.merge(graphdef, ref_params, rest)
  logp, _ = token_logprobs(model, mb["tokens"], mb["attention_mask"],
                           chunk=cfg.logprob_chunk, temperature=row_temperatures(_roles(mb), cfg),
                           positions=mb.get("positions"))
  return jax.lax.stop_gradient(logp)


def row_temperatures(roles: jax.Array, cfg: RLConfig) -> jax.Array:
  """The sampling temperature [mb] of each row: its role's (config.sampling.<role>)."""
  return jnp.where(roles == DESIGNER, cfg.designer_temperature, cfg.agent_temperature)


def _roles(mb: dict[str, jax.Array]) -> jax.Array:
  """The micro-batch's role ids [mb]; a batch without them is all the agent's."""
  return mb.get("roles", jnp.full(mb["tokens"].shape[:1], AGENT, jnp.int32))


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
    sums = {k: (jnp.maximum(sums[k], v) if k.endswith("_max") else sums[k] + v)
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
  """Pooled metrics, then the same per role under "agent/" and "designer/"."""
  out = {"loss": sums["loss"], "grad_norm": grad_norm,
         "entropy": sums["entropy_sum"] / jnp.maximum(sums["loss_tokens"], 1.0)}
  for p in _PREFIXES:
    tokens = jnp.maximum(sums[f"{p}loss_tokens"], 1.0)
    out.update({
        f"{p}kl": sums[f"{p}kl_sum"] / tokens,
        f"{p}clip_fraction": sums[f"{p}clipped_sum"] / tokens,
        f"{p}logprob_gap_mean": sums[f"{p}gap_sum"] / tokens,
        f"{p}logprob_gap_max": sums[f"{p}gap_max"],
        # pi_train / pi_rollout on loss tokens, and the share truncated at tis_cap.
        f"{p}importance_ratio_mean": sums[f"{p}ratio_sum"] / tokens,
        f"{p}importance_ratio_max": sums[f"{p}ratio_max"],
        f"{p}tis_truncated_fraction": sums[f"{p}truncated_sum"] / tokens,
        f"{p}loss_tokens": sums[f"{p}loss_tokens"],
    })
  return out
