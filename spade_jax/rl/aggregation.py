"""Loss aggregation modes as per-token weights computed on the host for the whole batch.

Every mode is a weighted sum: loss = sum_{b,t} w[b, t] * per_token_loss[b, t], with
w = 0 wherever loss_mask = 0. Computing w once for the full batch (before it is split
into micro-batches) makes gradient accumulation exact: the micro-batch losses simply
add up to the full-batch loss, whatever the split.

  token_mean            every loss token of the batch counts the same:
                        w = mask / sum(mask).
  seq_mean_token_mean   mean over tokens within a sequence, then mean over sequences
                        (sequences without loss tokens are not counted):
                        w = mask / (len_b * num_seqs).
  seq_mean_token_sum_norm  Dr. GRPO: token sums per sequence divided by one constant
                        (the padded length T), mean over sequences, so long and short
                        answers are not re-weighted by their length:
                        w = mask / (T * num_seqs).

Role balance (`role_balanced`, config.rl.role_balance) applies any mode within each role
and gives the designer's rows together the weight `designer_share` (the agent's the rest),
so the designer's part of the gradient is set by the config, not by how many tokens its
rows happen to have; a role absent from the batch leaves all the weight to the other.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spade_jax.rl.batch import AGENT, DESIGNER


def _token_mean(mask: np.ndarray) -> np.ndarray:
  return mask / max(mask.sum(), 1.0)


def _seq_mean_token_mean(mask: np.ndarray) -> np.ndarray:
  lengths = mask.sum(axis=1, keepdims=True)  # [B, 1]
  num_seqs = max((lengths > 0).sum(), 1)
  return mask / (np.maximum(lengths, 1.0) * num_seqs)


def _seq_mean_token_sum_norm(mask: np.ndarray) -> np.ndarray:
  num_seqs = max((mask.sum(axis=1) > 0).sum(), 1)
  return mask / (mask.shape[1] * num_seqs)


# name -> f(loss_mask [B, T] float64 in {0, 1}) -> token weights [B, T]
AGGREGATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "token_mean": _token_mean,
    "seq_mean_token_mean": _seq_mean_token_mean,
    "seq_mean_token_sum_norm": _seq_mean_token_sum_norm,
}


def token_weights(loss_mask: np.ndarray, mode: str, roles: np.ndarray | None = None,
                  designer_share: float | None = None) -> np.ndarray:
  """Per-token loss weights [B, T] float32 for the named aggregation mode.

  With `roles` [B] and `designer_share`, the mode is applied per role and the roles are
  mixed by `role_balanced`.
  """
  if mode not in AGGREGATIONS:
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {sorted(AGGREGATIONS)}")
  mask = np.asarray(loss_mask, np.float64)
  if roles is None or designer_share is None:
    return AGGREGATIONS[mode](mask).astype(np.float32)
  return role_balanced(mask, np.asarray(roles), designer_share, AGGREGATIONS[mode])


def role_balanced(mask: np.ndarray, roles: np.ndarray, designer_share: float,
                  aggregate: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
  """Weights [B, T]: `aggregate` within each role's rows, scaled to the role's share."""
  shares = {AGENT: 1.0 - designer_share, DESIGNER: designer_share}
  present = {r: s for r, s in shares.items() if mask[roles == r].sum() > 0}
  total = sum(present.values())
  weights = np.zeros_like(mask)
  for role, share in present.items():
    rows = roles == role
    weights[rows] = aggregate(mask[rows]) * (share / total if total > 0 else 1 / len(present))
  return weights.astype(np.float32)
