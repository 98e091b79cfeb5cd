"""The repeated-random-sequence test: can a model copy from its context?

Rows of random ordinary tokens, each followed by the same row again. A model that copies
predicts the second copy far better than the first (which nothing predicts); one without
induction heads scores both alike. The build records it after each training stage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.tokenizer.base import CHAT_SPECIAL_TOKENS

# The project's tokenizers give the control tokens the first ids (starter.tokenizer_train).
FIRST_ORDINARY_ID = len(CHAT_SPECIAL_TOKENS)


def repeat_rows(vocab_size: int, first_id: int = FIRST_ORDINARY_ID, *, rows: int = 8,
              length: int = 64, seed: int = 0) -> np.ndarray:
  """The repeat test's rows before repeating: [rows, length] ids in [first_id, vocab_size)."""
  if not 0 <= first_id < vocab_size:
    raise ValueError(f"first_id={first_id} outside the vocabulary [0, {vocab_size})")
  return np.random.default_rng(seed).integers(first_id, vocab_size, (rows, length))


def repeat_test(model: nnx.Module, first_id: int = FIRST_ORDINARY_ID, *, rows: int = 8,
                length: int = 64, seed: int = 0) -> dict[str, float]:
  """Mean next-token NLL on the first and the repeated copy, and top-1 on the repeat.

  Tokens are drawn from [first_id, vocab_size): by default the ids after the control tokens.
  """
  seq = repeat_rows(model.cfg.vocab_size, first_id, rows=rows, length=length, seed=seed)
  tokens = jnp.asarray(np.concatenate([seq, seq], axis=1), jnp.int32)  # [R, 2L]
  logp = jax.nn.log_softmax(model(tokens)[:, :-1], axis=-1)  # [R, 2L-1, V]
  nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]  # [R, 2L-1]
  hits = jnp.argmax(logp, axis=-1) == tokens[:, 1:]
  return {"first_nll": round(float(nll[:, :length - 1].mean()), 3),
          "repeat_nll": round(float(nll[:, length:].mean()), 3),
          "repeat_top1": round(float(hits[:, length:].mean()), 3)}
