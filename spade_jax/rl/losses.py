"""Token log-probs from the model and the per-token GRPO loss.

Conventions: `logp[b, t]` is log pi(tokens[b, t] | tokens[b, :t]), so column 0 (no
context) is 0 and never carries loss. Only tokens with loss_mask == 1 (sampled by the
policy) contribute; everything is selected with `jnp.where`, never multiplied by the
mask, so the gradient reaching a masked token is exactly zero and garbage in the
behaviour log-probs of masked tokens cannot leak in as NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from spade_jax.model.sharding import constrain, logical_to_spec
from spade_jax.rl.config import RLConfig
from spade_jax.rl.kl import KL_ESTIMATORS

# exp() of a larger log importance ratio would overflow; the clipped objective makes the
# gradient of such tokens zero anyway except for negative advantages (see docs/rl.md).
LOG_RATIO_BOUND = 20.0


def token_logprobs(model, tokens: jax.Array, attention_mask: jax.Array, *, chunk: int,
                   temperature: float | jax.Array = 1.0, remat: bool = False,
                   positions: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Returns (logp [B, T], entropy [B, T]) of each token given its prefix.

  The logits are divided by `temperature`: one for every row, or one a row ([B]), the one
  the row was sampled at, so that logp is the sampling distribution's.

  The vocabulary projection runs over `chunk` positions at a time in a loop, so the
  forward pass holds only [B, chunk, V] float32 logits at once. With `remat` the backward
  pass recomputes each chunk's logits from the hidden state (one more vocabulary matmul)
  instead of keeping them, so no [B, T, V] array is ever held; without it the chunks'
  softmax residuals are kept for the backward pass (about one [B, T, V] float32 array).

  `positions` [B, L] (ascending positions >= 1 of each row, then 0 for unused slots; see
  `step_inputs.loss_positions`) limits the vocabulary projection to those positions: every
  other position gets logp = entropy = 0, as position 0 always does. Prompts and
  environment observations carry no loss, so their logits are not computed at all.
  """
  h = model.hidden(tokens, attention_mask=attention_mask)  # [B, T, D]
  b, t, _ = h.shape
  temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (b,))
  if positions is None:
    logp, entropy = _chunked_logprobs(model, h[:, :-1], tokens[:, 1:], chunk, temperature,
                                      remat)  # [B, T - 1]
    zero = jnp.zeros((b, 1), jnp.float32)
    return jnp.concatenate([zero, logp], axis=1), jnp.concatenate([zero, entropy], axis=1)
  h_prev = jnp.take_along_axis(h, jnp.maximum(positions - 1, 0)[..., None], axis=1)  # [B, L, D]
  targets = jnp.take_along_axis(tokens, positions, axis=1)  # [B, L]
  logp, entropy = _chunked_logprobs(model, h_prev, targets, chunk, temperature, remat)
  return _at_positions(logp, positions, t), _at_positions(entropy, positions, t)


def _chunked_logprobs(model, h: jax.Array, targets: jax.Array, chunk: int,
                      temperature: jax.Array, remat: bool) -> tuple[jax.Array, jax.Array]:
  """h [B, N, D] predicts targets [B, N] at temperature [B] -> (logp, entropy) [B, N],
  `chunk` positions a time."""
  b, n, d = h.shape
  num_chunks = -(-n // chunk)
  size = min(chunk, n)
  pad = num_chunks * size - n
  h_chunks = jnp.pad(h, ((0, 0), (0, pad), (0, 0))).reshape(b, num_chunks, size, d)
  h_chunks = h_chunks.swapaxes(0, 1)  # [N / C, B, C, D]
  t_chunks = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, num_chunks, size).swapaxes(0, 1)

  head = vocab_parallel_head(model)  # once, outside the chunk loop

  def one_chunk(args):
    hc, tc = args
    hc = constrain(hc, (None, None, None))  # [B, C, D]: the micro-batch's rows on every chip
    logits = model.logits_from_hidden(hc, head, _VOCAB_PARALLEL) / temperature[:, None, None]
    logz = jax.nn.logsumexp(logits, axis=-1)  # [B, C]
    picked = _picked(logits, tc)  # [B, C]
    probs = jax.lax.stop_gradient(jnp.exp(logits - logz[..., None]))
    entropy = logz - jnp.sum(probs * logits, axis=-1)  # [B, C]
    return picked - logz, jax.lax.stop_gradient(entropy)

  if remat:
    one_chunk = jax.checkpoint(one_chunk)
  logp, entropy = jax.lax.map(one_chunk, (h_chunks, t_chunks))  # [N / C, B, C] each
  return (logp.swapaxes(0, 1).reshape(b, -1)[:, :n],
          entropy.swapaxes(0, 1).reshape(b, -1)[:, :n])


_VOCAB_PARALLEL = (None, None, "vocab_parallel")  # logits [B, C, V]: vocabulary over chips


def vocab_parallel_head(model) -> jax.Array:
  """The LM head's weight split over every chip along the vocabulary (one reshard a call).

  The chunk loop then computes each chunk's logits for all of the micro-batch's rows against
  each chip's slice of the vocabulary: inside the loop only [B, C, D] hidden states and
  [B, C] sums cross chips, never the [V, D] table (which FSDP would otherwise gather once per
  chunk), and the head's gradient stays a local [D, V / n] sum. Without a mesh, the weight.
  """
  weight, vocab_axis = model.head_weight()
  axes = [None, None]
  axes[vocab_axis] = "vocab_parallel"
  return constrain(weight, tuple(axes))


def _picked(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """logits [B, C, V] at targets [B, C]. Vocabulary-sharded logits take a masked sum (each
  chip reads its own slice, then one [B, C] sum crosses chips; a gather would collect the
  logits); unsharded ones a gather (one read a position, not a pass over V)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or logical_to_spec(_VOCAB_PARALLEL, logits.shape, mesh)[2] is None:
    return jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2)
  return jnp.sum(jnp.where(vocab == targets[..., None], logits, 0.0), axis=-1)


def _at_positions(values: jax.Array, positions: jax.Array, length: int) -> jax.Array:
  """values [B, L] placed at positions [B, L] of a zero [B, length]; slots at 0 add 0."""
  rows = jnp.arange(values.shape[0])[:, None]
  values = jnp.where(positions > 0, values, 0.0)
  return jnp.zeros((values.shape[0], length), values.dtype).at[rows, positions].add(values)


def grpo_token_loss(logp: jax.Array, behaviour_logp: jax.Array, ref_logp: jax.Array | None,
                    advantages: jax.Array, loss_mask: jax.Array, cfg: RLConfig,
                    tis_rows: jax.Array | None = None,
                    ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Per-token clipped-ratio loss plus beta * KL; zero off the loss mask.

  loss_t = w_t * max(-A * r_t, -A * clip(r_t, 1 - clip_low, 1 + clip_high)) + beta * KL_t.
  Without truncated importance sampling (tis_cap = 0): r_t = exp(logp_t - behaviour_logp_t)
  and w_t = 1. With it: r_t = exp(logp_t - prox_t) against the trainer's own log-probs
  prox_t = stop_gradient(logp_t), and w_t = min(exp(prox_t - behaviour_logp_t), tis_cap),
  detached: the rollout/train mismatch enters as a bounded weight, not through the clip
  (verl's rollout correction, slime's --use-tis). `tis_rows` [B] bool limits TIS to those
  rows (the agent's, sampled by the current policy: their gap is engine vs trainer); the
  others (the designer's, sampled k updates back) keep the plain clipped ratio against their
  behaviour log-probs, which bounds their staleness (docs/rl.md). None: every row. Returns
  the loss [B, T] and per-token terms (kl, clipped, gap, ratio, truncated) for the metrics.
  """
  mask = loss_mask > 0  # [B, T]
  # pi_train / pi_rollout per token: the mismatch the engine's sampling left.
  mismatch = _ratio(jnp.where(mask, jax.lax.stop_gradient(logp) - behaviour_logp, 0.0))
  if cfg.tis_cap > 0:
    tis = mask if tis_rows is None else mask & tis_rows[:, None]  # [B, T]
    ratio = _ratio(jnp.where(tis, logp - jax.lax.stop_gradient(logp),  # 1, with grad
                             jnp.where(mask, logp - behaviour_logp, 0.0)))
    weight = jnp.where(tis, jnp.minimum(mismatch, cfg.tis_cap), 1.0)
    truncated = tis & (mismatch > cfg.tis_cap)
  else:
    ratio = _ratio(jnp.where(mask, logp - behaviour_logp, 0.0))
    weight = 1.0
    truncated = jnp.zeros_like(mask)
  adv = advantages[:, None]  # [B, 1]
  unclipped = -adv * ratio
  clipped = -adv * jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
  per_token = weight * jnp.maximum(unclipped, clipped)
  if cfg.beta > 0:
    kl = jnp.where(mask, KL_ESTIMATORS[cfg.kl_estimator](logp, ref_logp), 0.0)
    per_token = per_token + cfg.beta * kl
  else:
    kl = jnp.zeros_like(logp)
  terms = {
      "kl": kl,
      "clipped": (mask & (clipped > unclipped)).astype(jnp.float32),
      "gap": jnp.where(mask, jnp.abs(behaviour_logp - logp), 0.0),
      "ratio": jnp.where(mask, mismatch, 0.0),
      "truncated": truncated.astype(jnp.float32),
  }
  return jnp.where(mask, per_token, 0.0), terms


def _ratio(log_ratio: jax.Array) -> jax.Array:
  return jnp.exp(jnp.clip(log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
