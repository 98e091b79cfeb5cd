"""Host-side checks and layout of a TrainBatch for the jitted step.

The step sees fixed shapes so it compiles rarely: the sequence length is padded up to a
power of two (at least MIN_LENGTH) and the rows up to a whole number of micro-batches,
each a multiple of the mesh's batch shards (`model.sharding.batch_shards`). Padding rows
have zero loss weight and an all-ones attention mask (so no attention row is empty and
nothing can become NaN).

With `chunk` set, the batch also carries each row's loss positions ("positions" [M, mb, L],
`loss_positions`), so the step computes logits only there. L is the largest row's count
rounded up to a multiple of max(chunk, T / 8) (a multiple of chunk): at most 8 shapes, and
so at most 8 compilations, per padded length.
"""

from __future__ import annotations

import numpy as np

from spade_jax.rl.batch import TrainBatch

MIN_LENGTH = 16


def padded_length(t: int) -> int:
  """Next power of two >= max(t, MIN_LENGTH)."""
  return max(MIN_LENGTH, 1 << (max(t, 1) - 1).bit_length())


def loss_positions(loss_mask: np.ndarray, chunk: int) -> np.ndarray:
  """[rows, T] 0/1 -> [rows, L] int32: each row's loss positions ascending, then zeros."""
  rows, length = loss_mask.shape
  counts = (loss_mask > 0).sum(axis=1)
  step = chunk * max(1, length // 8 // chunk)
  width = min(length, -(-max(int(counts.max(initial=0)), 1) // step) * step)
  order = np.argsort(loss_mask <= 0, axis=1, kind="stable")[:, :width]  # loss positions first
  return np.where(np.arange(width) < counts[:, None], order, 0).astype(np.int32)


def check_batch(batch: TrainBatch, vocab_size: int) -> None:
  """Raises ValueError naming the field and rows when the batch breaks its contract."""
  loss = np.asarray(batch.loss_mask)
  attn = np.asarray(batch.attention_mask)
  if not np.isin(loss, (0, 1)).all() or not np.isin(attn, (0, 1)).all():
    raise ValueError("TrainBatch.loss_mask and attention_mask must contain only 0 and 1")
  bad = np.flatnonzero(((loss > 0) & (attn == 0)).any(axis=1))
  if bad.size:
    raise ValueError(f"TrainBatch.loss_mask is 1 on padding (attention_mask 0) in rows "
                     f"{bad.tolist()}")
  bad = np.flatnonzero(loss[:, 0] > 0)
  if bad.size:
    raise ValueError(f"TrainBatch.loss_mask[:, 0] must be 0 (the first token has no context "
                     f"to be sampled from) in rows {bad.tolist()}")
  tokens = np.asarray(batch.tokens)
  bad = np.flatnonzero(((tokens < 0) | (tokens >= vocab_size)).any(axis=1))
  if bad.size:
    raise ValueError(f"TrainBatch.tokens outside [0, {vocab_size}) in rows {bad.tolist()}")
  behaviour = np.where(loss > 0, batch.behaviour_logprobs, 0.0)
  bad = np.flatnonzero((~np.isfinite(behaviour) | (behaviour > 1e-4)).any(axis=1))
  if bad.size:
    raise ValueError(f"TrainBatch.behaviour_logprobs must be finite and <= 0 on loss tokens; "
                     f"rows {bad.tolist()} are not")


def prepare_batch(batch: TrainBatch, advantages: np.ndarray, weights: np.ndarray, *,
                  micro_batch_size: int, multiple_of: int, vocab_size: int,
                  chunk: int | None = None) -> dict[str, np.ndarray]:
  """Checks, pads and reshapes to {name: [M, mb, T] (or [M, mb])} numpy arrays.

  With `chunk`, adds "positions" [M, mb, L] (see the module docstring).
  """
  check_batch(batch, vocab_size)
  b, t = batch.tokens.shape
  mb = micro_batch_size or -(-b // multiple_of) * multiple_of
  rows = -(-b // mb) * mb
  length = padded_length(t)

  def pad(x, fill, dtype):
    x = np.asarray(x, dtype)
    widths = [(0, rows - b)] + ([(0, length - t)] if x.ndim == 2 else [])
    out = np.pad(x, widths, constant_values=0)
    if fill:
      out[b:] = fill  # padding rows
    return out.reshape(rows // mb, mb, *out.shape[1:])

  arrays = {
      "tokens": pad(batch.tokens, 0, np.int32),
      "attention_mask": pad(batch.attention_mask, 1, np.int32),
      "loss_mask": pad(batch.loss_mask, 0, np.float32),
      "behaviour_logprobs": pad(np.where(batch.loss_mask > 0, batch.behaviour_logprobs, 0.0),
                                0, np.float32),
      "weights": pad(weights, 0, np.float32),
      "advantages": pad(advantages, 0, np.float32),
      "roles": pad(batch.roles, 0, np.int32),  # padding rows: no loss tokens, role unused
  }
  if chunk is not None:
    loss = arrays["loss_mask"]
    arrays["positions"] = loss_positions(loss.reshape(rows, length), chunk).reshape(
        *loss.shape[:2], -1)
  return arrays
