"""A hand-built in-context copying circuit, written into the starter's random model.

The agent must copy an action word from the observation into its reply, and a designer
copies names and numbers from the passage. That takes induction heads (a previous-token head
and a head that attends to the token after an earlier occurrence of the current one), and
they do not form within a CPU build's few million pretraining tokens: the model stays on the
uniform plateau (bench/RESULTS_LOG.md, "The starter cannot copy"). So the build writes one such
pair into the freshly drawn weights, as plain Qwen3 parameters, and training starts from it:

  layer 0, kv head 0: queries and keys are a constant direction (embedding feature 0, the
    same for every token), so after RoPE the score depends only on the distance; the RoPE
    frequency weights (a small linear programme) put the peak at distance 1 for every
    distance the model's positions allow. Its value, the token's content, is written into a
    random subspace of the residual stream: each position learns which token came before it.
  layer 1, kv head 0: the query is the current token's content, the key the previous-token
    subspace, both in the lowest RoPE frequencies (nearly position-free), so it attends to
    positions whose predecessor is the current token; its value, that position's own token,
    goes back to the stream in the embedding basis, and the tied LM head turns it into that
    token's logit.

The rest of the model stays as drawn (the embedding with a larger scale, so that the written
signals stand above the other heads' noise). Nothing in the architecture changes: the result
saves and loads as an ordinary Hugging Face Qwen3.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from scipy.optimize import linprog

from spade_jax.model.layers import rope_frequencies
from spade_jax.model.qwen3 import Qwen3


@dataclasses.dataclass(frozen=True)
class CircuitSettings:
  embed_std: float = 0.2  # token embeddings ~ N(0, embed_std^2) (the model's draw uses 0.02)
  constant_feature: float = 0.6  # embedding feature 0 of every token: the positional direction
  previous_write: float = 0.4  # scale of the previous-token head's output
  copy_write: float = 10.0  # scale of the induction head's output
  previous_norm_gain: float = 3.0  # layer 0 q/k-norm scale on the previous-token frequencies
  match_norm_gain: float = 3.0  # layer 1 q/k-norm scale on the matching frequencies
  previous_pairs: int = 12  # highest RoPE frequency pairs the previous-token head uses
  match_pairs: int = 12  # lowest RoPE frequency pairs the induction head matches in


def previous_token_rope(head_dim: int, theta: float, span: int, pairs: int
                        ) -> tuple[np.ndarray, np.ndarray, float]:
  """(frequencies, weights, margin) of the `pairs` highest RoPE frequencies.

  sum_i w_i cos((d - 1) f_i) over distances d in [0, span) is largest at d = 1, ahead of
  every other distance by `margin` (maximised by a linear programme; sum w = 1, w >= 0).
  """
  freqs = np.asarray(rope_frequencies(head_dim, theta), np.float64)[:pairs]  # the model's own
  distances = np.r_[0, 2:span]
  gaps = 1.0 - np.cos(np.outer(distances - 1, freqs))  # [D, P]: score(1) - score(d) per pair
  objective = np.r_[np.zeros(pairs), -1.0]  # variables [w, margin]; maximise the margin
  result = linprog(objective, A_ub=np.hstack([-gaps, np.ones((len(distances), 1))]),
                   b_ub=np.zeros(len(distances)), A_eq=np.r_[np.ones(pairs), 0.0][None],
                   b_eq=[1.0], bounds=[(0, None)] * pairs + [(None, None)], method="highs")
  if not result.success or result.x[-1] <= 0:
    raise ValueError(f"no previous-token RoPE weighting over {pairs} frequency pairs "
                     f"(theta {theta}, {span} positions): {result.message}")
  return freqs, result.x[:pairs], float(result.x[-1])


def _orthonormal_rows(rng: np.random.Generator, rows: int, dim: int, skip_first: bool
                      ) -> np.ndarray:
  """[rows, dim] with orthonormal rows, drawn at random (feature 0 left out if asked)."""
  draw = rng.standard_normal((dim, rows))
  if skip_first:
    draw[0] = 0.0
  q, _ = np.linalg.qr(draw)
  return q.T


def _check(cfg, settings: CircuitSettings) -> None:
  half = cfg.head_dim // 2
  problems = []
  if not cfg.tie_word_embeddings:
    problems.append("tie_word_embeddings is false (the copy reaches the logits through the "
                    "tied LM head)")
  if cfg.num_layers < 2:
    problems.append(f"num_layers={cfg.num_layers} < 2")
  if cfg.hidden_size <= cfg.head_dim:
    problems.append(f"hidden_size={cfg.hidden_size} <= head_dim={cfg.head_dim}")
  for name in ("previous_pairs", "match_pairs"):
    if not 1 <= getattr(settings, name) <= half:
      problems.append(f"{name}={getattr(settings, name)} outside [1, head_dim/2={half}]")
  if problems:
    raise ValueError("copy circuit: " + "; ".join(problems))


def install(model: Qwen3, seed: int = 0, settings: CircuitSettings = CircuitSettings()
            ) -> dict[str, float]:
  """Writes the two heads into `model`'s parameters (in place); a summary for build.json."""
  cfg = model.cfg
  _check(cfg, settings)
  rng = np.random.default_rng([seed, 0xC0B7])
  d, hd = cfg.hidden_size, cfg.head_dim
  embed = model.embed.embedding
  table = rng.standard_normal(embed.value.shape) * settings.embed_std
  table[:, 0] = settings.constant_feature
  embed.value = jnp.asarray(table, embed.value.dtype)

  read = _orthonormal_rows(rng, hd, d, skip_first=True)  # [Hd, D]: a token's content
  stream = _orthonormal_rows(rng, hd, d, skip_first=True)  # [Hd, D]: where "previous" goes
  first, second = model.layer(0), model.layer(1)
  margin = _previous_token_head(first.attn, cfg, settings, read, stream)
  _induction_head(second.attn, cfg, settings, read, stream,
                  _orthonormal_rows(rng, settings.match_pairs * 2, hd, skip_first=False),
                  _orthonormal_rows(rng, hd, d, skip_first=True))
  model.set_layer(0, first)
  model.set_layer(1, second)
  return {"previous_token_margin": round(margin, 4), "embed_std": settings.embed_std}


def _previous_token_head(attn, cfg, settings: CircuitSettings, read: np.ndarray,
                         stream: np.ndarray) -> float:
  """Kv head 0 of layer 0 attends one position back and writes that token's content
  (`read`) into the `stream` subspace; returns the RoPE weighting's margin."""
  d, hd, group = cfg.hidden_size, cfg.head_dim, cfg.num_heads // cfg.num_kv_heads
  freqs, weights, margin = previous_token_rope(hd, cfg.rope_theta, cfg.max_position_embeddings,
                                               settings.previous_pairs)
  pairs = np.arange(settings.previous_pairs)
  q = np.zeros((d, group, hd))
  q[0, :, pairs] = np.sqrt(weights)[:, None]  # angle 0, on the constant feature
  k = np.zeros((d, hd))  # each frequency's key sits one step ahead of the query
  k[0, pairs] = np.sqrt(weights) * np.cos(freqs)
  k[0, pairs + hd // 2] = np.sqrt(weights) * np.sin(freqs)
  _head(attn, q, k, read.T, settings.previous_write * stream, np.r_[pairs, pairs + hd // 2],
        settings.previous_norm_gain)
  return margin


def _induction_head(attn, cfg, settings: CircuitSettings, read: np.ndarray, stream: np.ndarray,
                    mix: np.ndarray, value: np.ndarray) -> None:
  """Kv head 0 of layer 1 matches the current token's content against the `stream`
  subspace in the lowest frequencies (`mix` [M, Hd] picks M directions of each) and copies
  the attended token (`value` [Hd, D]) to the logits."""
  d, hd, group = cfg.hidden_size, cfg.head_dim, cfg.num_heads // cfg.num_kv_heads
  half = hd // 2
  match = np.r_[half - settings.match_pairs:half, hd - settings.match_pairs:hd]
  q = np.zeros((d, group, hd))
  q[:, :, match] = (mix @ read).T[:, None, :]
  k = np.zeros((d, hd))
  k[:, match] = stream.T @ mix.T
  _head(attn, q, k, value.T, settings.copy_write * value, match, settings.match_norm_gain)


def _head(attn, q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray,
          used: np.ndarray, norm_gain: float) -> None:
  """Kv head 0 of `attn` and its query group: q [D, G, Hd], k and v [D, Hd], out [Hd, D];
  q/k-norm scale `norm_gain` on the head dims `used`.

  Only the group's first query head writes to the stream (the others share its keys).
  """
  group = q.shape[1]
  outs = np.zeros((group,) + out.shape)  # [G, Hd, D]
  outs[0] = out
  edits = ((attn.q_proj.kernel, (slice(None), slice(0, group)), q),
           (attn.k_proj.kernel, (slice(None), 0), k),
           (attn.v_proj.kernel, (slice(None), 0), v),
           (attn.o_proj.kernel, slice(0, group), outs))
  for param, where, value in edits:
    array = np.array(param.value, np.float32)
    array[where] = value
    param.value = jnp.asarray(array, param.value.dtype)
  for norm in (attn.q_norm.scale, attn.k_norm.scale):
    array = np.array(norm.value, np.float32)
    array[used] = norm_gain
    norm.value = jnp.asarray(array, norm.value.dtype)
