"""The supervised (next-token) update: cross-entropy weighted per token, one jitted call.

`lm_step(params, opt_state, rest, batch, *, graphdef, tx, chunk)` is a pure top-level function
like `rl.train_step.train_step`: `compile_lm_step` jits it with explicit shardings (the
parameters' own, the batch rows over the mesh's data and fsdp axes) and donates `params` and
`opt_state`. The optimiser is the trainer's (`rl.optim.make_optimizer`) and the log-probs the
GRPO loss's (`rl.losses.token_logprobs`), so pretraining, fine-tuning and RL share one stack.

`batch` holds [M, mb, ...] arrays (M micro-batches summed in a `lax.scan`):
  tokens, attention_mask  [M, mb, T] int32
  weights                 [M, mb, T] float32: token t's share of the loss (sums to 1 over the
                          batch, 0 off the loss mask), so the loss is the mean NLL a target token
  positions (optional)    [M, mb, L] int32: the rows' loss positions (rl.step_inputs), so
                          logits are computed only where there is loss
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh

from spade_jax.model.sharding import batch_shards
from spade_jax.rl.losses import token_logprobs
from spade_jax.rl.optim import step_shardings


def _micro_loss(params, rest, mb: dict[str, jax.Array], *, graphdef, chunk: int) -> jax.Array:
  model = nnx.merge(graphdef, params, rest)
  logp, _ = token_logprobs(model, mb["tokens"], mb["attention_mask"], chunk=chunk,
                           positions=mb.get("positions"))  # [mb, T]
  return -jnp.sum(jnp.where(mb["weights"] > 0, mb["weights"] * logp, 0.0))


def lm_step(params, opt_state, rest, batch: dict[str, jax.Array], *, graphdef,
            tx: optax.GradientTransformation, chunk: int) -> tuple[Any, Any, dict[str, jax.Array]]:
  """One optimiser update on the weighted next-token NLL; returns params, state, metrics."""

  def body(carry, mb):
    grads, loss = carry
    mb_loss, mb_grads = jax.value_and_grad(_micro_loss)(params, rest, mb, graphdef=graphdef,
                                                        chunk=chunk)
    return (jax.tree.map(jnp.add, grads, mb_grads), loss + mb_loss), None

  zeros = jax.tree.map(jnp.zeros_like, params)
  (grads, loss), _ = jax.lax.scan(body, (zeros, jnp.zeros((), jnp.float32)), batch)
  grad_norm = optax.tree.norm(grads)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state, {"loss": loss, "grad_norm": grad_norm}


def batch_multiple(mesh: Mesh | None) -> int:
  """Rows of a micro-batch must be a multiple of this (`sharding.batch_shards`)."""
  return batch_shards(mesh)


def compile_lm_step(graphdef, tx: optax.GradientTransformation, mesh: Mesh | None, params, rest,
                    *, chunk: int) -> tuple[Callable, Callable, Any]:
  """(jitted step with params and opt_state donated, jitted tx.init, batch sharding)."""
  step_fn = functools.partial(lm_step, graphdef=graphdef, tx=tx, chunk=chunk)
  if mesh is None:
    return jax.jit(step_fn, donate_argnums=(0, 1)), jax.jit(tx.init), None
  replicated, batch_sh, param_sh, opt_sh = step_shardings(tx, mesh, params)
  step = jax.jit(step_fn, donate_argnums=(0, 1),
                 in_shardings=(param_sh, opt_sh, jax.tree.map(lambda x: x.sharding, rest),
                               batch_sh),
                 out_shardings=(param_sh, opt_sh, replicated))
  return step, jax.jit(tx.init, out_shardings=opt_sh), batch_sh
