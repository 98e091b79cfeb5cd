"""Group-relative advantages, computed on the host from a TrainBatch's scalar rewards.

Rows that share a prompt form a group; each row's advantage compares its reward with
the other rows of its group. Groups are keyed by (role, group_id), so designer and agent
samples are never normalised together, and each role's advantages are then scaled by
its weight from the config (the two signals stay on comparable scales, and a weight
of 0 switches a role's gradient off). Optional per-row `offsets` are added after the group
normalisation and before the role weight.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spade_jax.rl.batch import AGENT, DESIGNER

ROLE_NAMES = {AGENT: "agent", DESIGNER: "designer"}


def _grpo(r: np.ndarray, *, bessel: bool, eps: float) -> np.ndarray:
  """(r - mean) / (std + eps); a group of one (or of one with Bessel) gets 0."""
  ddof = 1 if bessel else 0
  if r.size <= ddof:
    return np.zeros_like(r)
  return (r - r.mean()) / (r.std(ddof=ddof) + eps)


def _dr_grpo(r: np.ndarray, *, bessel: bool, eps: float) -> np.ndarray:
  """Dr. GRPO: r - mean, without the std division (no difficulty re-weighting)."""
  del bessel, eps
  return r - r.mean()


def _rloo(r: np.ndarray, *, bessel: bool, eps: float) -> np.ndarray:
  """Leave-one-out baseline: r_i - mean of the other rows of the group."""
  del bessel, eps
  n = r.size
  if n == 1:
    return np.zeros_like(r)
  return (r - (r.sum() - r) / (n - 1))


# name -> f(rewards of one group [n] float64, *, bessel, eps) -> advantages [n]
ADVANTAGE_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "grpo": _grpo,
    "dr_grpo": _dr_grpo,
    "rloo": _rloo,
}


def compute_advantages(rewards: np.ndarray, group_ids: np.ndarray, roles: np.ndarray, *,
                       estimator: str = "grpo", bessel: bool = False, eps: float = 1e-6,
                       role_weights: dict[int, float] | None = None,
                       offsets: np.ndarray | None = None,
                       ) -> tuple[np.ndarray, dict[str, float]]:
  """Returns per-row advantages [B] float32 (role weight applied) and per-role stats."""
  rewards = np.asarray(rewards, np.float64)
  group_ids, roles = np.asarray(group_ids), np.asarray(roles)
  if not np.all(np.isfinite(rewards)):
    bad = np.flatnonzero(~np.isfinite(rewards)).tolist()
    raise ValueError(f"TrainBatch.rewards has non-finite values at rows {bad}")
  unknown = sorted(set(roles.tolist()) - set(ROLE_NAMES))
  if unknown:
    raise ValueError(f"TrainBatch.roles has unknown role ids {unknown}; expected {ROLE_NAMES}")
  fn = ADVANTAGE_ESTIMATORS[estimator]
  role_weights = role_weights or {}
  adv = np.zeros_like(rewards)
  keys = np.stack([roles, group_ids], axis=1)
  _, inverse = np.unique(keys, axis=0, return_inverse=True)
  for g in range(inverse.max() + 1 if rewards.size else 0):
    rows = np.flatnonzero(inverse.reshape(-1) == g)
    adv[rows] = fn(rewards[rows], bessel=bessel, eps=eps)
  if offsets is not None:
    adv += np.asarray(offsets, np.float64)
  stats = {}
  for role, name in ROLE_NAMES.items():
    rows = roles == role
    if not rows.any():
      continue
    adv[rows] *= role_weights.get(role, 1.0)
    stats.update({
        f"{name}/num_rows": float(rows.sum()),
        f"{name}/reward_mean": float(rewards[rows].mean()),
        f"{name}/reward_std": float(rewards[rows].std()),
        f"{name}/advantage_mean": float(adv[rows].mean()),
        f"{name}/advantage_std": float(adv[rows].std()),
        f"{name}/advantage_absmax": float(np.abs(adv[rows]).max()),
        f"{name}/zero_advantage_share": float((adv[rows] == 0).mean()),
    })
  return adv.astype(np.float32), stats
