"""Where a sampled reply ends: stop token ids, stop strings, max_new_tokens.

Shared by the real engine and `FakeEngine` so both end replies at the same place.
Conventions (also in docs/engine.md):
  * the token that triggers a stop (a stop id, or the token that completes a stop
    string) is KEPT in `tokens`/`logprobs` and in the conversation history;
  * finish_reason is "stop" for a stop id or string, "length" when max_new_tokens
    tokens were sampled without a stop, "cache_full" when the conversation's cache
    has no room for the next token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spade_jax.engine.api import SamplingParams

Detokenize = Callable[[Sequence[int]], str]


def validate_params(params: SamplingParams, detokenize: Detokenize | None) -> None:
  """Raises ValueError on sampling parameters no engine can honour."""
  if params.max_new_tokens <= 0:
    raise ValueError(f"SamplingParams.max_new_tokens must be > 0, got {params.max_new_tokens}")
  if params.temperature < 0:
    raise ValueError(f"SamplingParams.temperature must be >= 0, got {params.temperature}")
  if not 0.0 < params.top_p <= 1.0:
    raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
  if params.top_k < 0:
    raise ValueError(f"SamplingParams.top_k must be >= 0 (0 = off), got {params.top_k}")
  if any(not s for s in params.stop_strings):
    raise ValueError("SamplingParams.stop_strings must not contain an empty string")
  if params.stop_strings and detokenize is None:
    raise ValueError("SamplingParams.stop_strings needs an engine built with detokenize=")


def find_stop_string(tokens: Sequence[int], stop_strings: Sequence[str],
                     detokenize: Detokenize) -> int | None:
  """Smallest n such that detokenize(tokens[:n]) contains a stop string, else None.

  One full decode when no stop string occurs (the common case), then a binary search
  over prefixes: containing a stop string is monotone in the prefix length.
  """
  if not stop_strings or not tokens:
    return None

  def hit(n: int) -> bool:
    text = detokenize(list(tokens[:n]))
    return any(s in text for s in stop_strings)

  if not hit(len(tokens)):
    return None
  lo, hi = 1, len(tokens)
  while lo < hi:
    mid = (lo + hi) // 2
    if hit(mid):
      hi = mid
    else:
      lo = mid + 1
  return lo


def truncate_reply(tokens: Sequence[int], params: SamplingParams,
                   detokenize: Detokenize | None) -> tuple[int, str | None]:
  """Returns (number of tokens to keep, finish_reason or None while the reply goes on)."""
  tokens = list(tokens[:params.max_new_tokens])
  stop_id_end = next((i + 1 for i, t in enumerate(tokens) if t in params.stop_token_ids), None)
  if stop_id_end is not None:
    tokens = tokens[:stop_id_end]
  if params.stop_strings:
    end = find_stop_string(tokens, params.stop_strings, detokenize)
    if end is not None:
      return end, "stop"
  if stop_id_end is not None:
    return stop_id_end, "stop"
  if len(tokens) == params.max_new_tokens:
    return len(tokens), "length"
  return len(tokens), None
