"""Continuous batching, multi-turn continuation, stops and logprobs of the slot engine."""

import jax
import numpy as np
import pytest
from flax import nnx

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.slot_engine import SlotEngine
from spade_jax.model import make_mesh
from spade_jax.model.sharding import state_shardings
from tests.engine import engine_testlib as lib

TOL = 1e-4  # fp32: cached decode vs one uncached forward
CONFIG = dict(num_slots=4, max_cache_len=64, prefill_buckets=(16,), decode_steps_per_poll=4,
              decode_widths=(2,), decode_lengths=())  # decode windows: 2 or 4 slots


def detok(ids):
  return "".join(f"<{t}>" for t in ids)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  return lib.write_checkpoint(tmp_path_factory.mktemp("dense"), "dense", seed=3)[1]


@pytest.fixture(scope="module")
def engine(model):
  return SlotConversationEngine(model, detokenize=detok, **CONFIG)


def run(engine, requests):
  for r in requests:
    engine.submit(r)
  out = {}
  while engine.pending():
    for c in engine.poll():
      assert c.conversation_id not in out
      out[c.conversation_id] = c
  return out


def prompt(n, offset=0):
  return [(7 * i + offset) % lib.VOCAB for i in range(1, n + 1)]


def test_logprobs_are_under_the_sampled_distribution(engine, model):
  """Cached prefill (two chunks: 20 > bucket 16) + decode == one uncached forward."""
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda st, ids: nnx.merge(graphdef, st)(ids))
  p = prompt(20)
  cases = {"t1": SamplingParams(10, temperature=1.0, seed=1),
           "greedy": SamplingParams(10, temperature=0.0),
           "topk": SamplingParams(10, temperature=0.7, top_k=5, seed=2)}
  got = run(engine, [Request(name, p, sp) for name, sp in cases.items()])
  for name in cases:
    c = got[name]
    ids = np.array([p + c.tokens[:-1]])
    logits = np.asarray(forward(state, ids))[0, len(p) - 1:]  # [10, V]
    if name == "topk":
      kept = np.argsort(-logits, axis=-1)[:, :5]
      assert all(t in k for t, k in zip(c.tokens, kept, strict=True))
      z = logits / 0.7
      masked = np.full_like(z, -np.inf)
      np.put_along_axis(masked, kept, np.take_along_axis(z, kept, -1), -1)
      expected = lib.log_softmax(masked)
    else:
      expected = lib.log_softmax(logits)
    np.testing.assert_allclose(c.logprobs, expected[np.arange(10), c.tokens], atol=TOL, rtol=0)
    if name == "greedy":
      assert c.tokens == logits.argmax(-1).tolist()
  for name in cases:
    engine.release(name)


def test_multi_turn_continuation_equals_reprefilling(engine):
  sp = SamplingParams(8, temperature=1.0, seed=5)
  first = run(engine, [Request("conv", prompt(10), sp)])["conv"]
  second = run(engine, [Request("conv", [5, 6, 7, 8, 9], sp)])["conv"]
  history = engine.conversation_tokens("conv")
  assert history == tuple(prompt(10) + first.tokens + [5, 6, 7, 8, 9] + second.tokens)
  again = run(engine, [Request("fresh", history[:-8], sp)])["fresh"]
  assert again.tokens == second.tokens
  np.testing.assert_allclose(again.logprobs, second.logprobs, atol=TOL, rtol=0)
  engine.release("conv")
  engine.release("fresh")


def test_continuous_batching_gives_each_request_its_solo_tokens(engine):
  """6 requests on 4 slots (queueing, eviction), greedy and seeded, two turns each."""
  specs = [(3, 2, 0.0), (20, 13, 1.0), (9, 5, 0.8), (15, 9, 0.0), (4, 11, 1.0), (12, 3, 1.0)]
  reqs = [Request(i, prompt(n, i), SamplingParams(m, temperature=t, top_p=0.9, seed=i))
          for i, (n, m, t) in enumerate(specs)]
  solo = {}
  for r in reqs:
    solo[r.conversation_id] = run(engine, [Request(("solo", r.conversation_id), r.new_token_ids,
                                                   r.params)])[("solo", r.conversation_id)]
    engine.release(("solo", r.conversation_id))
  together = run(engine, reqs)
  assert {i: c.tokens for i, c in together.items()} == {i: c.tokens for i, c in solo.items()}
  assert [len(together[i].tokens) for i in range(6)] == [m for _, m, _ in specs]
  # Second turn for all six at once; some caches were evicted and get re-prefilled.
  turn2 = run(engine, [Request(r.conversation_id, [1, 2, 3], r.params) for r in reqs])
  for r in reqs:
    history = engine.conversation_tokens(r.conversation_id)
    n = len(turn2[r.conversation_id].tokens)
    ref = run(engine, [Request("ref", history[:-n], r.params)])["ref"]
    engine.release("ref")
    assert ref.tokens == turn2[r.conversation_id].tokens
  for r in reqs:
    engine.release(r.conversation_id)


def test_stop_ids_and_stop_strings_end_at_the_right_token(engine):
  p = prompt(6)
  free = run(engine, [Request("free", p, SamplingParams(12, temperature=0.0))])["free"].tokens
  stop_id = free[5]
  stop_str = detok(free[3:5])
  got = run(engine, [
      Request("id", p, SamplingParams(12, temperature=0.0, stop_token_ids=(stop_id,))),
      Request("str", p, SamplingParams(12, temperature=0.0, stop_strings=(stop_str,)))])
  assert got["id"].tokens == free[:free.index(stop_id) + 1]
  assert got["id"].finish_reason == "stop"
  end = next(n for n in range(1, 13) if stop_str in detok(free[:n]))
  assert got["str"].tokens == free[:end] and got["str"].finish_reason == "stop"
  assert len(got["str"].logprobs) == end
  # The conversation continues after the truncated reply exactly as if re-prefilled.
  nxt = run(engine, [Request("str", [4], SamplingParams(5, temperature=0.0))])["str"]
  ref = run(engine, [Request("ref", p + free[:end] + [4], SamplingParams(5, temperature=0.0))])
  assert nxt.tokens == ref["ref"].tokens
  for cid in ("free", "id", "str", "ref"):
    engine.release(cid)


def test_cache_full_and_load_weights(engine, model):
  full = run(engine, [Request("full", prompt(60), SamplingParams(10, temperature=0.0))])["full"]
  assert full.finish_reason == "cache_full" and len(full.tokens) == 4
  again = run(engine, [Request("full", [1], SamplingParams(3, temperature=0.0))])["full"]
  assert again.finish_reason == "cache_full" and again.tokens == []
  engine.release("full")
  original = nnx.state(model)
  base = run(engine, [Request("w", prompt(5), SamplingParams(6, temperature=0.0))])["w"].tokens
  engine.release("w")
  engine.load_weights(jax.tree.map(lambda x: -x, original))
  flipped = run(engine, [Request("w", prompt(5), SamplingParams(6, temperature=0.0))])["w"]
  engine.release("w")
  engine.load_weights(model)
  back = run(engine, [Request("w", prompt(5), SamplingParams(6, temperature=0.0))])["w"].tokens
  engine.release("w")
  assert flipped.tokens != base and back == base


def test_jetstream_prefill_insert_generate(engine, model):
  """prefill -> insert into slot 2 -> generate blocks == the conversation engine's reply."""
  p = prompt(11)
  sp = SamplingParams(9, temperature=1.0, seed=4)
  expected = run(engine, [Request("js", p, sp)])["js"]
  engine.release("js")
  core = SlotEngine(model, num_slots=4, max_cache_len=64, prefill_buckets=(16,), decode_steps=4)
  state = core.init_decode_state()
  prefix = core.prefill(core.params, [p], [sp], [9])
  state = core.insert(prefix, state, [2])
  tokens = [int(prefix.token[0])]
  active = np.array([False, False, True, False])
  while len(tokens) < 9:
    state, block = core.generate(core.params, state, active)
    tokens += block.tokens[2][block.valid[2]].tolist()
    assert not block.valid[[0, 1, 3]].any()
  assert tokens == expected.tokens


@pytest.mark.parametrize("params", [SamplingParams(200, temperature=0.0),
                                    SamplingParams(200, temperature=1.0, seed=9)])
def test_reused_slot_ignores_the_previous_conversation(model, params):
  """A long conversation leaves entries past the next append's window: they stay invisible."""
  config = dict(num_slots=1, max_cache_len=256, prefill_buckets=(16,))
  used = SlotConversationEngine(model, **config)
  run(used, [Request("a", prompt(119), SamplingParams(120, temperature=0.0))])
  used.release("a")
  reused = run(used, [Request("b", [5, 6, 7], params)])["b"]
  fresh = run(SlotConversationEngine(model, **config), [Request("b", [5, 6, 7], params)])["b"]
  assert reused.tokens == fresh.tokens
  np.testing.assert_allclose(reused.logprobs, fresh.logprobs, rtol=0, atol=TOL)


def test_capacity_follows_the_owned_conversations_and_keeps_idle_caches(model):
  """Long conversations grow the decode state; once released it shrinks back, and an idle
  conversation that lived through both resizes continues exactly as it does alone."""
  config = dict(num_slots=4, max_cache_len=64, prefill_buckets=(16,), decode_steps_per_poll=4,
                decode_widths=(2,), decode_lengths=(24, 48))
  greedy = SamplingParams(4, temperature=0.0)
  turns = [prompt(5), prompt(3, offset=40)]

  alone = SlotConversationEngine(model, **config)
  expected = [run(alone, [Request("a", t, greedy)])["a"].tokens for t in turns]
  assert alone.capacity == (2, 24)

  shared = SlotConversationEngine(model, **config)
  first = run(shared, [Request("a", turns[0], greedy)])["a"].tokens
  long = [Request(c, prompt(30, offset=i), SamplingParams(10, temperature=0.0))
          for i, c in enumerate("bcd")]
  run(shared, long)
  assert shared.capacity == (4, 48)
  for c in "bcd":
    shared.release(c)
  second = run(shared, [Request("a", turns[1], greedy)])["a"].tokens
  assert shared.capacity == (2, 24)
  assert [first, second] == expected


def test_a_reply_outgrowing_its_prompts_capacity_keeps_its_cache(model):
  """Each poll fits the decode state to the owned conversations, a decoding turn with its
  reply so far (read or still on the device): a 50-token reply to a 5-token prompt keeps
  the entries past the 24 its prompt alone needs and samples what it does at full length."""
  greedy = SamplingParams(50, temperature=0.0)
  out = []
  for lengths in ((24, 48), ()):
    engine = SlotConversationEngine(model, **dict(CONFIG, decode_lengths=lengths))
    out.append(run(engine, [Request("long", prompt(5), greedy)])["long"])
  assert out[0].tokens == out[1].tokens
  np.testing.assert_allclose(out[0].logprobs, out[1].logprobs, rtol=0, atol=TOL)


def test_owned_slots_are_packed_low_and_continue_exactly(model):
  """When early slots free up, later conversations move down (cache and all) so the state
  shrinks to their count; their next turns equal the same conversations run alone."""
  config = dict(num_slots=4, max_cache_len=64, prefill_buckets=(16,), decode_steps_per_poll=4,
                decode_widths=(2,), decode_lengths=())
  params = SamplingParams(5, temperature=1.0, seed=11)
  first = {c: prompt(6, offset=i) for i, c in enumerate("abcd")}
  second = {c: prompt(4, offset=30 + i) for i, c in enumerate("abcd")}

  expected = {}
  for c in "cd":
    alone = SlotConversationEngine(model, **config)
    expected[c] = [run(alone, [Request(c, t[c], params)])[c].tokens for t in (first, second)]

  shared = SlotConversationEngine(model, **config)
  out = run(shared, [Request(c, first[c], params) for c in "abcd"])
  assert shared.capacity[0] == 4
  shared.release("a")
  shared.release("b")
  again = run(shared, [Request(c, second[c], params) for c in "cd"])
  assert shared.capacity[0] == 2
  assert {c: [out[c].tokens, again[c].tokens] for c in "cd"} == expected


def test_one_capacity_and_a_token_budget_sample_the_turns_of_the_ladders(model):
  """The few-programs setting (one decode capacity, never resized; appends reading 24 entries
  or the whole row; 32 tokens a prefill call, so 16-token pieces run 2 rows at a time, three
  as 2 + 1 padded) samples the same two turns of three conversations as the ladders of
  widths and rows (CONFIG)."""
  few = SlotConversationEngine(model, **dict(CONFIG, decode_widths=(), append_lengths=(24,),
                                             prefill_tokens=32))
  assert few.engine.append_rows(16) == (2,) and few.capacity == (4, 80)
  params = SamplingParams(6, temperature=1.0, seed=5)
  turns = [{"a": prompt(10), "b": prompt(22, 1), "c": prompt(19, 2)},
           {c: prompt(4, offset=20 + i) for i, c in enumerate("abc")}]
  out = []
  for engine in (SlotConversationEngine(model, **CONFIG), few):
    done = [run(engine, [Request(c, t[c], params) for c in t]) for t in turns]
    out.append({c: ([d[c].tokens for d in done], sum((d[c].logprobs for d in done), []))
                for c in "abc"})
  assert few.capacity == (4, 80)
  for c in "abc":
    assert out[1][c][0] == out[0][c][0]
    np.testing.assert_allclose(out[1][c][1], out[0][c][1], rtol=0, atol=TOL)


def test_append_rows_pad_to_the_batch_shards_and_the_padding_writes_no_slot(model):
  """On a (data 2, fsdp 2) mesh the row buckets are multiples of the engine's 2 batch shards
  (its rows split over data; fsdp splits its copy of the weights, sharding.INFERENCE_RULES),
  so an append's rows split over the data axis: 3 rows run as 4, the padding row naming no
  slot. Same tokens and log-probs
  as without a mesh, and only the three slots written."""
  mesh = make_mesh({"data": 2, "fsdp": 2}, jax.devices()[:4])
  graphdef, params = nnx.split(model)
  sharded = nnx.merge(graphdef, jax.device_put(params, state_shardings(params, mesh)))
  config = dict(num_slots=6, max_cache_len=64, prefill_buckets=(16,), decode_widths=(),
                decode_lengths=())
  plain, split = SlotEngine(model, **config), SlotEngine(sharded, mesh=mesh, **config)
  assert plain.row_buckets == (1, 4, 6) and split.row_buckets == (2, 4, 6)
  sp = [SamplingParams(4, temperature=0.0)] * 3
  chunks = [prompt(5), prompt(9, 1), prompt(3, 2)]
  out = []
  for engine in (plain, split):
    state, tok, lp = engine.append(engine.params, engine.init_decode_state(), [4, 0, 2],
                                   [0, 0, 0], chunks, sp, [4] * 3)
    out.append((tok, lp, np.asarray(state.cache.end)))
  (want_tok, want_lp, want_end), (got_tok, got_lp, got_end) = out
  assert got_tok.tolist() == want_tok.tolist()
  np.testing.assert_allclose(got_lp, want_lp, atol=TOL)
  assert got_end.tolist() == want_end.tolist() == [9, 0, 3, 0, 5, 0]
