"""Per-row token sampling with the log-probability of the distribution actually used.

For each row b with logits z (float32, [V]):
  * temperature[b] == 0 (greedy): token = argmax z; logprob = log_softmax(z)[token],
    i.e. the temperature-1 log-probability of the chosen token.
  * otherwise: z' = z / temperature; top-k keeps the k largest z' (top_k == 0: all);
    top-p then keeps the smallest set of the remaining tokens, in decreasing order,
    whose renormalised probability mass reaches top_p (the most likely token is
    always kept); tokens tied with the last kept value are kept too. The token is
    drawn from softmax(z' restricted to the kept set) (inverse CDF, one uniform per row)
    and logprob is its log-probability under that renormalised distribution.
Randomness: the key of a token is fold_in(key(seed), position) where position is
the token's position in its conversation, so a request samples the same tokens
whatever slot it runs in and whatever else is in the batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_keys(seeds: jax.Array, positions: jax.Array) -> jax.Array:
  """One PRNG key per row from (request seed, position of the token sampled). [B]."""
  return jax.vmap(lambda s, p: jax.random.fold_in(jax.random.key(s), p))(
      seeds.astype(jnp.uint32), positions.astype(jnp.uint32))


def filter_logits(scaled: jax.Array, top_p: jax.Array, top_k: jax.Array) -> jax.Array:
  """Sets logits outside the top-k / top-p set to -inf. scaled [B, V], top_p/top_k [B]."""
  vocab = scaled.shape[-1]
  desc = -jnp.sort(-scaled, axis=-1)  # [B, V] descending
  k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)  # [B]
  rank = jnp.arange(vocab)[None, :]
  desc = jnp.where(rank < k[:, None], desc, -jnp.inf)  # top-k applied
  probs = jax.nn.softmax(desc, axis=-1)
  mass_before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
  keep = (mass_before < top_p[:, None]) & (rank < k[:, None])
  keep = keep.at[:, 0].set(True)
  threshold = jnp.min(jnp.where(keep, desc, jnp.inf), axis=-1)  # [B] smallest kept logit
  return jnp.where(scaled >= threshold[:, None], scaled, -jnp.inf)


def sample(logits: jax.Array, keys: jax.Array, temperature: jax.Array, top_p: jax.Array,
           top_k: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Samples one token per row. logits [B, V]; keys [B]; params [B]. -> tokens, logprobs [B]."""
  logits = logits.astype(jnp.float32)
  greedy = temperature <= 0.0
  # Greedy rows: no scaling and no filter, so their logp is the temperature-1 log-softmax.
  scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
  top_p = jnp.where(greedy, 1.0, top_p)
  top_k = jnp.where(greedy, 0, top_k)
  needs_filter = jnp.any((top_p < 1.0) | (top_k > 0))
  scaled = jax.lax.cond(needs_filter, filter_logits, lambda s, p, k: s, scaled, top_p, top_k)
  shifted = scaled - jnp.max(scaled, axis=-1, keepdims=True)
  weights = jnp.exp(shifted)  # [B, V] unnormalised probabilities (0 where filtered)
  argmax = jnp.argmax(logits, axis=-1)
  drawn = jax.lax.cond(jnp.all(greedy), lambda k, w: argmax, _inverse_cdf, keys, weights)
  tokens = jnp.where(greedy, argmax, drawn).astype(jnp.int32)
  chosen = jnp.take_along_axis(shifted, tokens[:, None], axis=-1)[:, 0]
  logprobs = chosen - jnp.log(jnp.sum(weights, axis=-1))
  return tokens, logprobs


def _inverse_cdf(keys: jax.Array, weights: jax.Array) -> jax.Array:
  """One uniform per row against the cumulative weights: an exact categorical draw at the
  cost of one cumsum (a Gumbel draw needs a random number and two logs per entry, several
  times the whole decode step's sampling cost on CPU). weights [B, V] -> tokens [B]."""
  u = jax.vmap(jax.random.uniform)(keys)  # [B] in [0, 1)
  cdf = jnp.cumsum(weights, axis=-1)
  # First index whose cdf exceeds u * total; zero-weight entries can never be picked.
  token = jnp.sum(cdf <= (u * cdf[:, -1])[:, None], axis=-1)
  return jnp.minimum(token, weights.shape[-1] - 1)
