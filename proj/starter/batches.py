"""Fixed-shape batches for the supervised stages; step s's batch is a pure function of s.

Pretraining concatenates the documents (each ended by <|endoftext|>) into one token stream
and cuts it into windows of `length` tokens: no padding at all. Fine-tuning examples have a
loss mask (only the reply tokens are learned) and very different lengths, so each batch takes
examples of one length bucket (powers of two up to BUCKET_STEP, then multiples of it), as many
rows as fill `tokens_per_step`; logits are computed only at the loss positions, whose count is
padded to the bucket's largest, so each bucket compiles the step once. Both
plans shuffle with a seed per epoch, so resuming at step s replays exactly the data of an
uninterrupted run from s on: the data position is the step index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from spade_jax.rl.step_inputs import loss_positions

MIN_BUCKET = 256
BUCKET_STEP = 1024


def bucket_length(n: int, min_bucket: int = MIN_BUCKET, step: int = BUCKET_STEP) -> int:
  """Padded length of an n-token example: a power of two (>= min_bucket) up to `step`, then
  multiples of `step`. Fewer buckets, fewer compilations, more padding."""
  if n <= step:
    return max(min_bucket, 1 << (max(n, 1) - 1).bit_length())
  return _round_up(n, step)


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class WindowPlan:
  """Pretraining: `rows` random windows of the stream per step."""

  windows: np.ndarray  # [N, length] int32
  rows: int
  seed: int = 0

  @classmethod
  def from_documents(cls, docs: Sequence[Sequence[int]], eot_id: int, length: int, rows: int,
                     seed: int = 0) -> WindowPlan:
    stream = np.concatenate([np.append(np.asarray(d, np.int32), eot_id) for d in docs])
    n = len(stream) // length
    if n < 1:
      raise ValueError(f"pretraining text has {len(stream)} tokens, fewer than one window of "
                       f"{length}")
    return cls(stream[:n * length].reshape(n, length), rows, seed)

  def tokens_per_step(self) -> int:
    return self.rows * (self.windows.shape[1] - 1)

  def batch(self, step: int) -> dict[str, np.ndarray]:
    n, length = self.windows.shape
    picked = []
    for i in range(step * self.rows, (step + 1) * self.rows):
      epoch, at = divmod(i, n)
      picked.append(np.random.default_rng([self.seed, epoch]).permutation(n)[at])
    tokens = self.windows[picked]
    weights = np.full(tokens.shape, 1.0 / self.tokens_per_step(), np.float32)
    weights[:, 0] = 0.0
    return {"tokens": tokens[None], "attention_mask": np.ones_like(tokens)[None],
            "weights": weights[None]}


@dataclasses.dataclass(frozen=True)
class BucketPlan:
  """Fine-tuning: batches of one length bucket; the loss only where `loss_mask` is 1."""

  tokens: tuple[np.ndarray, ...]
  masks: tuple[np.ndarray, ...]
  batches: tuple[tuple[int, ...], ...]  # example indices of each batch of one epoch
  buckets: tuple[int, ...]  # the bucket length of each batch
  rows: tuple[int, ...]  # the row count of each batch (fixed per bucket: one compile each)
  widths: dict[int, int]  # bucket length -> loss positions a row (the bucket's largest)
  chunk: int
  seed: int = 0

  @classmethod
  def build(cls, examples: Sequence[tuple[Sequence[int], Sequence[int]]], *, max_length: int,
            tokens_per_step: int, multiple_of: int = 1, chunk: int = 64,
            min_bucket: int = MIN_BUCKET, bucket_step: int = BUCKET_STEP,
            seed: int = 0) -> BucketPlan:
    """Examples longer than `max_length` (or without loss tokens) are left out."""
    kept = [(np.asarray(t, np.int32), np.asarray(m, np.float32)) for t, m in examples
            if len(t) <= max_length and sum(m) > 0]
    if not kept:
      raise ValueError(f"no fine-tuning example fits in {max_length} tokens")
    bucket_of = [bucket_length(len(t), min_bucket, bucket_step) for t, _ in kept]
    order = np.random.default_rng(seed).permutation(len(kept))
    batches, buckets, row_counts = [], [], []
    for bucket in sorted(set(bucket_of)):
      members = [int(i) for i in order if bucket_of[i] == bucket]
      rows = _round_up(max(1, tokens_per_step // bucket), multiple_of)
      for start in range(0, len(members), rows):
        batches.append(tuple(members[start:start + rows]))
        buckets.append(bucket)
        row_counts.append(rows)
    plan = cls(tuple(t for t, _ in kept), tuple(m for _, m in kept), tuple(batches),
               tuple(buckets), tuple(row_counts), {}, chunk, seed)
    for index, bucket in enumerate(buckets):
      width = plan.arrays(index)["positions"].shape[-1]
      plan.widths[bucket] = max(plan.widths.get(bucket, 0), width)
    return plan

  def steps_per_epoch(self) -> int:
    return len(self.batches)

  def batch(self, step: int) -> dict[str, np.ndarray]:
    """Step `step`'s batch: epoch step // steps_per_epoch, in that epoch's shuffled order."""
    epoch, at = divmod(step, len(self.batches))
    index = int(np.random.default_rng([self.seed, epoch]).permutation(len(self.batches))[at])
    arrays = self.arrays(index)
    pad = self.widths[self.buckets[index]] - arrays["positions"].shape[-1]
    arrays["positions"] = np.pad(arrays["positions"], ((0, 0), (0, 0), (0, pad)))  # 0 = unused
    return arrays

  def arrays(self, index: int) -> dict[str, np.ndarray]:
    """The arrays of batch `index` of the epoch (positions not yet padded to the bucket's)."""
    members, length, rows = self.batches[index], self.buckets[index], self.rows[index]
    tokens = np.zeros((rows, length), np.int32)
    attention = np.ones((rows, length), np.int32)  # padding rows attend: nothing turns NaN
    mask = np.zeros((rows, length), np.float32)
    for row, i in enumerate(members):
      n = len(self.tokens[i])
      tokens[row, :n] = self.tokens[i]
      attention[row, n:] = 0
      mask[row, :n] = self.masks[i]
    mask[:, 0] = 0.0
    weights = mask / max(mask.sum(), 1.0)
    return {"tokens": tokens[None], "attention_mask": attention[None], "weights": weights[None],
            "positions": loss_positions(mask, self.chunk)[None]}
