"""The pieces learn together: GRPO through the real engine and sandbox raises the return.

The tiny model (random init) plays the bundled two-turn vowels environment
(spade_jax/envs/vowels, reward = share of vowels in each answer) in the sandbox pool,
sampling through the slot engine, whose behaviour log-probs feed the trainer. Its mean
return must rise clearly within a few steps (fixed seeds), training the full weights or,
with LoRA, only the adapters (the engine samples with the adapters on).
"""

import numpy as np
import pytest
from flax import nnx

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.envs.vowels import VOWELS_SOURCE
from spade_jax.model import Qwen3, get_preset
from spade_jax.rl.batch import AGENT, TrainBatch
from spade_jax.rl.trainer import Trainer
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.tokenizer import load_tokenizer

PROMPTS, GROUP, NEW_TOKENS, STEPS = 4, 8, 6, 14
LORA_STEPS = 8
RL = dict(learning_rate=3e-2, beta=0.01, clip_low=0.2, clip_high=0.28, grad_clip_norm=1.0,
          loss_agg="token_mean", logprob_chunk=64)


def rollout(engine, pool, tokenizer, step: int) -> tuple[TrainBatch, float]:
  """PROMPTS env seeds x GROUP episodes, every turn sampled by the engine."""
  episodes = [(f"{step}-{p}-{g}", 1000 * step + p) for p in range(PROMPTS) for g in range(GROUP)]
  rows = {eid: ([], [], []) for eid, _ in episodes}  # tokens, loss mask, behaviour logprobs
  returns = dict.fromkeys(rows, 0.0)
  records = pool.reset([(eid, VOWELS_SOURCE, seed) for eid, seed in episodes])
  live = {eid: rec.observation for (eid, _), rec in zip(episodes, records, strict=True)}
  assert all(rec.error_kind is None for rec in records), records
  turn = 0
  while live:
    for i, (eid, obs) in enumerate(live.items()):
      ids = tokenizer.encode(obs + "\n")
      rows[eid][0].extend(ids)
      rows[eid][1].extend([0.0] * len(ids))
      rows[eid][2].extend([0.0] * len(ids))
      seed = (step * 7919 + turn) * 1000 + i
      engine.submit(Request(eid, ids, SamplingParams(max_new_tokens=NEW_TOKENS, seed=seed)))
    actions = {}
    while engine.pending():
      for done in engine.poll():
        rows[done.conversation_id][0].extend(done.tokens)
        rows[done.conversation_id][1].extend([1.0] * len(done.tokens))
        rows[done.conversation_id][2].extend(done.logprobs)
        actions[done.conversation_id] = tokenizer.decode(done.tokens)
    results = pool.step(list(actions.items()))
    live = {}
    for (eid, _), rec in zip(actions.items(), results, strict=True):
      assert rec.error_kind is None, rec
      returns[eid] += rec.reward
      if rec.done:
        engine.release(eid)
      else:
        live[eid] = rec.observation
    turn += 1
  length = max(len(r[0]) for r in rows.values())

  def padded(i, dtype):
    return np.array([r[i] + [0] * (length - len(r[i])) for r in rows.values()], dtype)

  attention = np.array([[1] * len(r[0]) + [0] * (length - len(r[0])) for r in rows.values()],
                       np.int32)
  batch = TrainBatch(tokens=padded(0, np.int32), attention_mask=attention,
                     loss_mask=padded(1, np.float32), behaviour_logprobs=padded(2, np.float32),
                     rewards=np.array(list(returns.values()), np.float32),
                     group_ids=np.repeat(np.arange(PROMPTS), GROUP).astype(np.int32),
                     roles=np.full(PROMPTS * GROUP, AGENT, np.int32))
  return batch, float(np.mean(list(returns.values())))


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(num_workers=2) as p:
    yield p


# LoRA's case is slow-tier only (tests/rl/test_rl_lora.py checks its step in `make test`).
@pytest.mark.parametrize("lora_rank", [0, pytest.param(8, marks=pytest.mark.slow)],
                         ids=["full", "lora"])
def test_grpo_through_engine_and_sandbox_raises_the_return(pool, lora_rank):
  tokenizer = load_tokenizer("tiny")
  model = Qwen3(get_preset("tiny", lora_rank=lora_rank, lora_alpha=64.0), rngs=nnx.Rngs(0))
  if lora_rank:  # Adapters on the projections move the hidden state, not the tied embedding:
    # its random N(0, 0.02) rows keep every logit under ~1.5, too flat a base to sharpen.
    model.embed.embedding[...] *= 10.0
  trainer = Trainer(dict(RL, learning_rate=0.1) if lora_rank else RL, model, seed=0)
  engine = SlotConversationEngine(trainer.policy, num_slots=PROMPTS * GROUP, max_cache_len=128,
                                  prefill_buckets=(32,), decode_steps_per_poll=NEW_TOKENS)
  curve, gaps = [], []
  for step in range(LORA_STEPS if lora_rank else STEPS):
    batch, mean_return = rollout(engine, pool, tokenizer, step)
    curve.append(mean_return)
    metrics = trainer.train_step(batch)
    gaps.append(metrics["logprob_gap_max"])
    assert abs(metrics["importance_ratio_mean"] - 1.0) < 1e-3, metrics
    engine.load_weights(trainer.policy)  # the updated buffers, no copy
  print("returns", np.round(curve, 3), "gap_max", np.round(gaps, 5))
  # The engine sampled from exactly the parameters the trainer differentiates.
  assert max(gaps) < 1e-3
  assert np.mean(curve[-2:]) > curve[0] + 0.2, curve
