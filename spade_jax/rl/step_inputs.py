"""Host-side checks and layout of a TrainBatch for the jitted step.

Every new shape of the step's batch compiles the step again, so a run fixes the shapes in
advance: with `BatchBounds` (rl/batch.py; `RLConfig.bounds`, derived from the run's config)
every batch pads to one of two shapes, `bounded_shape` without designer rows (agent_rows
rows) and with them (agent_rows + designer_rows rows), both bounds.length tokens long with
bounds.loss_tokens loss positions a row. So a run compiles its step at most twice, whatever
the number of valid designs or the longest episode of a step. A batch beyond the bounds
fails in `check_bounds`, naming the config field. Without bounds (a Trainer built on its
own: tests, benchmarks) each batch's own rows and length set its shape.

Rows pad to a whole number of micro-batches, each a multiple of the mesh's batch shards
(`model.sharding.batch_shards`); the length pads by `padded_length`: powers of two (at least
MIN_LENGTH) up to LENGTH_MULTIPLE, then multiples of it, so a 12,288-token cache trains at
12,288 tokens, not 16,384. Padding rows have zero loss weight and an all-ones attention mask
(so no attention row is empty and nothing can become NaN).

With `chunk` set, the batch also carries each row's loss positions ("positions" [M, mb, L],
`loss_positions`), so the step computes logits only there. With bounds, L is loss_tokens
rounded up to a multiple of chunk (at most the padded length); without, the largest row's
count rounded up to a multiple of max(chunk, T / 8) (a multiple of chunk): at most 8 shapes,
and so at most 8 compilations, per padded length.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from spade_jax.rl.batch import DESIGNER, BatchBounds, TrainBatch

MIN_LENGTH = 16
LENGTH_MULTIPLE = 128  # a TPU vector's lanes: longer rows pad to a multiple of it


class StepShape(NamedTuple):
  """The step's batch: [rows // micro_batch, micro_batch, length] arrays and `loss_width`
  positions a row (None: the batch's own, `loss_positions`)."""

  rows: int
  micro_batch: int
  length: int
  loss_width: int | None = None


def padded_length(t: int) -> int:
  """The step's length for rows of up to t tokens: the next power of two >= MIN_LENGTH up to
  LENGTH_MULTIPLE, else the next multiple of LENGTH_MULTIPLE."""
  if t <= LENGTH_MULTIPLE:
    return max(MIN_LENGTH, 1 << (max(t, 1) - 1).bit_length())
  return _round_up(t, LENGTH_MULTIPLE)


def loss_positions(loss_mask: np.ndarray, chunk: int, width: int | None = None) -> np.ndarray:
  """[rows, T] 0/1 -> [rows, L] int32: each row's loss positions ascending, then zeros.

  L is `width` (a bounded step's, at least every row's count), else the module docstring's."""
  rows, length = loss_mask.shape
  counts = (loss_mask > 0).sum(axis=1)
  if width is None:
    step = chunk * max(1, length // 8 // chunk)
    width = min(length, _round_up(max(int(counts.max(initial=0)), 1), step))
  order = np.argsort(loss_mask <= 0, axis=1, kind="stable")[:, :width]  # loss positions first
  return np.where(np.arange(width) < counts[:, None], order, 0).astype(np.int32)


def bounded_shape(bounds: BatchBounds, *, designer: bool, micro_batch_size: int,
                  multiple_of: int, chunk: int | None) -> StepShape:
  """The one shape of every step within `bounds` with (`designer`) or without designer rows."""
  rows = bounds.agent_rows + (bounds.designer_rows if designer else 0)
  length = padded_length(bounds.length)
  width = None if chunk is None else min(length, _round_up(bounds.loss_tokens, chunk))
  return _shape(rows, length, width, micro_batch_size, multiple_of)


def step_shape(batch: TrainBatch, bounds: BatchBounds | None, *, micro_batch_size: int,
               multiple_of: int, chunk: int | None) -> StepShape:
  """`batch`'s padded shape: the bounded one (checked against `bounds`), else its own."""
  if bounds is None:
    return _shape(batch.num_rows, padded_length(batch.tokens.shape[1]), None,
                  micro_batch_size, multiple_of)
  check_bounds(batch, bounds)
  return bounded_shape(bounds, designer=bool((batch.roles == DESIGNER).any()),
                       micro_batch_size=micro_batch_size, multiple_of=multiple_of, chunk=chunk)


def check_bounds(batch: TrainBatch, bounds: BatchBounds) -> None:
  """Raises ValueError naming the config field when `batch` exceeds the run's bounds."""
  designer = int((batch.roles == DESIGNER).sum())
  limits = (("agent rows", batch.num_rows - designer, bounds.agent_rows,
             "selfplay.num_envs x selfplay.group_size x the arms trained"),
            ("designer rows", designer, bounds.designer_rows,
             "selfplay.num_envs per refresh that falls due, x 2 on a last step that "
             "refreshes; 0 with selfplay.train_designer off or selfplay.fixed_envs"),
            ("tokens in a row", batch.tokens.shape[1], bounds.length, "engine.max_cache_len"),
            ("loss tokens in a row", int((batch.loss_mask > 0).sum(axis=1).max(initial=0)),
             bounds.loss_tokens, "selfplay.max_turns x sampling.agent.max_new_tokens, "
             "sampling.designer.max_new_tokens"))
  for what, n, bound, source in limits:
    if n > bound:
      raise ValueError(f"TrainBatch has {n} {what}; the run's train step is compiled for at "
                       f"most {bound} ({source})")


def _shape(rows: int, length: int, width: int | None, micro_batch_size: int,
           multiple_of: int) -> StepShape:
  micro_batch = micro_batch_size or _round_up(rows, multiple_of)  # 0: one micro-batch
  return StepShape(_round_up(rows, micro_batch), micro_batch, length, width)


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


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
                  chunk: int | None = None,
                  bounds: BatchBounds | None = None) -> dict[str, np.ndarray]:
  """Checks, pads and reshapes to {name: [M, mb, T] (or [M, mb])} numpy arrays.

  With `bounds`, to the run's fixed shape; with `chunk`, adds "positions" [M, mb, L] (see
  the module docstring).
  """
  check_batch(batch, vocab_size)
  shape = step_shape(batch, bounds, micro_batch_size=micro_batch_size,
                     multiple_of=multiple_of, chunk=chunk)
  b, t = batch.tokens.shape
  rows, mb, length = shape.rows, shape.micro_batch, shape.length

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
    arrays["positions"] = loss_positions(loss.reshape(rows, length), chunk,
                                         shape.loss_width).reshape(*loss.shape[:2], -1)
  return arrays
