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


def filter_threshold(scaled: jax.Array, top_p: jax.Array, top_k: jax.Array) -> jax.Array:
  """Smallest logit [B] kept by top-k then top-p (see the module docstring). scaled [B, V]."""
  vocab = scaled.shape[-1]
  desc = -jnp.sort(-scaled, axis=-1)  # [B, V] descending
  k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)  # [B]
  rank = jnp.arange(vocab)[None, :]
  desc = jnp.where(rank < k[:, None], desc, -jnp.inf)  # top-k applied
  probs = jax.nn.softmax(desc, axis=-1)
  mass_before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
  keep = (mass_before < top_p[:, None]) & (rank < k[:, None])
  keep = keep.at[:, 0].set(True)
  return jnp.min(jnp.where(keep, desc, jnp.inf), axis=-1)


def sample(logits: jax.Array, keys: jax.Array, temperature: jax.Array, top_p: jax.Array,
           top_k: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Samples one token per row. logits [B, V]; keys [B]; params [B]. -> tokens, logprobs [B].

  Written as few passes over [B, V] as possible (each costs about a layer's attention on
  CPU): the row max, then the kept tokens' exp(z / t - max) summed per vocabulary block;
  the draw and the logprob read one block and one entry per row.
  """
  logits = logits.astype(jnp.float32)
  greedy = temperature <= 0.0
  # Greedy rows: no scaling and no filter, so their logp is the temperature-1 log-softmax.
  temp = jnp.where(greedy, 1.0, temperature)  # [B]
  top_p = jnp.where(greedy, 1.0, top_p)
  top_k = jnp.where(greedy, 0, top_k)
  needs_filter = jnp.any((top_p < 1.0) | (top_k > 0))
  threshold = jax.lax.cond(  # [B] smallest kept z / t (-inf: no filter)
      needs_filter, lambda z, p, k: filter_threshold(z / temp[:, None], p, k),
      lambda z, p, k: jnp.full(z.shape[:1], -jnp.inf), logits, top_p, top_k)
  top = jnp.max(logits, axis=-1) / temp  # [B] max of z / t, always kept
  blocks = _blocks(logits)  # [B, nb, BLOCK]
  block_sums = jnp.sum(_weights(blocks, temp, top, threshold), axis=-1)  # [B, nb]
  argmax = jax.lax.cond(jnp.any(greedy), lambda z: jnp.argmax(z, axis=-1).astype(jnp.int32),
                        lambda z: jnp.zeros(z.shape[:1], jnp.int32), logits)
  drawn = jax.lax.cond(jnp.all(greedy), lambda *_: argmax, _inverse_cdf, keys, blocks,
                       block_sums, (temp, top, threshold))
  tokens = jnp.where(greedy, argmax, drawn)
  chosen = jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0] / temp
  logprobs = chosen - top - jnp.log(jnp.sum(block_sums, axis=-1))
  return tokens, logprobs


_BLOCK = 128  # vocabulary entries per block of the two-level inverse CDF


def _blocks(logits: jax.Array) -> jax.Array:
  """[B, V] -> [B, nb, BLOCK] (a free reshape when BLOCK divides V, else padded with -inf,
  which has weight 0)."""
  b, vocab = logits.shape
  nb = -(-vocab // _BLOCK)
  if nb * _BLOCK != vocab:
    logits = jnp.pad(logits, ((0, 0), (0, nb * _BLOCK - vocab)), constant_values=-jnp.inf)
  return logits.reshape(b, nb, _BLOCK)


def _weights(z: jax.Array, temp: jax.Array, top: jax.Array, threshold: jax.Array) -> jax.Array:
  """exp(z / t - top) where z / t is kept, else 0: unnormalised probabilities. [B, ...]."""
  shape = (-1,) + (1,) * (z.ndim - 1)
  scaled = z / temp.reshape(shape)
  kept = scaled >= threshold.reshape(shape)
  return jnp.where(kept, jnp.exp(scaled - top.reshape(shape)), 0.0)


def _inverse_cdf(keys: jax.Array, blocks: jax.Array, block_sums: jax.Array,
                 weight_args: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
  """One uniform per row against the cumulative weights: an exact categorical draw (a Gumbel
  draw needs a random number and two logs per entry, several times the whole decode step's
  sampling cost on CPU). Two levels, so no [B, V] cumulative sum is formed (XLA's CPU
  cumsum is a reduce-window, quadratic in its length): cumulative block totals pick the
  block holding u * total, then a cumulative sum inside that block picks the entry.
  Zero-weight entries and blocks can never be picked. weight_args: _weights' (temp, top,
  threshold). -> tokens [B]."""
  block_cdf = jnp.cumsum(block_sums, axis=-1)  # [B, nb]
  target = jax.vmap(jax.random.uniform)(keys) * block_cdf[:, -1]  # [B] in [0, total)
  block = _first_above(block_cdf, target, block_sums > 0)  # [B]
  inside = _weights(jnp.take_along_axis(blocks, block[:, None, None], axis=1)[:, 0],
                    *weight_args)  # [B, BLOCK]
  before = jnp.take_along_axis(block_cdf - block_sums, block[:, None], axis=1)[:, 0]
  entry = _first_above(jnp.cumsum(inside, axis=-1), target - before, inside > 0)
  return block * _BLOCK + entry


def _first_above(cdf: jax.Array, target: jax.Array, allowed: jax.Array) -> jax.Array:
  """First index whose cdf [B, N] exceeds target [B], clamped to the last allowed index (a
  rounding guard: the target may land on the total)."""
  index = jnp.sum(cdf <= target[:, None], axis=-1)
  last = jnp.max(jnp.where(allowed, jnp.arange(cdf.shape[-1]), 0), axis=-1)
  return jnp.minimum(index, last).astype(jnp.int32)
