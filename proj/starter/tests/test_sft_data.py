"""Starter SFT examples: exactly the loop's prompts and targets, returns from the real sandbox."""

import collections
import dataclasses
import itertools

import numpy as np
import pytest

from proj.starter import copy_test, minigames, passages, sft_data, variants
from proj.starter.batches import BucketPlan
from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.envs.library import load_seed_library
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.sandbox.split import LocalExchange, SplitPool
from spade_jax.selfplay import corpus, designer, prompts, replies
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.prompts import MemoryView
from spade_jax.selfplay.timing import Timings
from spade_jax.tokenizer import load_tokenizer

# The tiny tokenizer spends about one token per character of Python (STACK_NOTES).
SETTINGS = SelfPlayConfig(designer_sampling=SamplingParams(max_new_tokens=8192))


@pytest.fixture(scope="module")
def tokenizer():
  return load_tokenizer("tiny")


@pytest.fixture(scope="module")
def envs(words):
  stream = variants.candidates(0, words=words)
  return [next(e for e in stream if e.base == b) for b in ("mastermind", "bridge", "coins",
                                                           "pancakes")]


@pytest.fixture(scope="module")
def pool():
  with SandboxPool(num_workers=1, require_oracle=True) as p:
    yield p


def _memory_view(uid, envs):
  if uid.startswith("seed/"):
    seed = next(s for s in load_seed_library(kind="games") if f"seed/{s.name}" == uid)
    return MemoryView(seed.category, seed.source, seed.hint, None, None, None)
  env = next(e for e in envs if e.uid == uid)
  return MemoryView(env.category, env.source, env.hint, None, None, None)


def test_designer_examples_are_what_the_loop_sends_and_accepts(tokenizer, envs, pool):
  examples = sft_data.designer_examples(envs, tokenizer, SETTINGS, per_env=2)
  assert len(examples) == 2 * len(envs)
  assert examples == sft_data.designer_examples(envs, tokenizer, SETTINGS, per_env=2)
  docs = {d[0]: d for d in corpus.default_documents()}
  ex = examples[2]  # bridge, first of two
  env = envs[1]
  assert ex.meta["uid"] == env.uid and examples[3].meta["passage_id"] != ex.meta["passage_id"]
  assert not passages.is_heldout(ex.meta["passage_id"])
  assert env.uid not in ex.meta["memory"] and len(ex.meta["memory"]) == 4
  # The first memory entry is a sibling (the seed game it came from): the target edits it.
  assert ex.meta["memory"][0] == f"seed/{env.base}"
  assert all(e.meta["memory"][0] == f"seed/{e.meta['base']}" for e in examples)
  n = ex.meta["prompt_tokens"]
  assert ex.loss_mask == [0] * n + [1] * (len(ex.tokens) - n)
  # The loop's designer path, fed the request as the loop builds it, must send these prompt
  # ids, and the example's target as the model's reply must come out as a valid design.
  doc_id, text, origin = docs[ex.meta["passage_id"]]
  request = designer.DesignRequest(0, env.category, doc_id, text[:corpus.DEFAULT_MAX_CHARS],
                                   tuple(_memory_view(u, envs) for u in ex.meta["memory"]),
                                   origin)
  sent = []

  def reply_fn(cid, history, params):
    sent.append(list(history))
    return ex.tokens[n:]

  params = dataclasses.replace(SETTINGS.designer_sampling,
                               stop_token_ids=tuple(tokenizer.stop_ids))
  (sample,) = designer.generate_designs(
      FakeEngine(reply_fn, steps_per_poll=1 << 20), pool, ChatFormatter(tokenizer), [request],
      params, setting="games", step=1, timings=Timings(),
      max_prompt_tokens=SETTINGS.max_prompt_tokens(params))
  assert sent == [ex.tokens[:n]]
  assert sample.valid, sample.detail
  assert (sample.source, sample.hint) == (env.source, env.hint)


def test_designer_targets_that_the_loop_would_cut_are_left_out(tokenizer, envs):
  sizes = [len(tokenizer.encode(designer.format_designer_output(e.source, e.hint))) + 1
           for e in envs]  # + the end-of-turn token
  limit = sorted(sizes)[1]
  short = dataclasses.replace(SETTINGS, designer_sampling=SamplingParams(max_new_tokens=limit))
  kept = sft_data.designer_examples(envs, tokenizer, short)
  fits = [e.uid for e, n in zip(envs, sizes, strict=True) if n <= limit]
  assert [ex.meta["uid"] for ex in kept] == fits
  assert 0 < len(kept) < len(envs)


def test_the_passage_split_is_fixed_and_disjoint():
  train, heldout = passages.train_passages(), passages.heldout_passages(64)
  assert len(heldout) == 64 and not set(heldout) & set(train)
  assert heldout == passages.heldout_passages(64) and len(train) > 10 * 64
  ids = [d[0] for d in corpus.default_documents()]
  assert 0.05 < sum(map(passages.is_heldout, ids)) / len(ids) < 0.15


def _segments(mask):
  """(start, end) of each run of ones."""
  runs, start = [], None
  for i, bit in enumerate([*mask, 0]):
    if bit and start is None:
      start = i
    elif not bit and start is not None:
      runs.append((start, i))
      start = None
  return runs


def test_agent_examples_play_the_oracle_in_the_sandbox_in_the_loop_format(tokenizer, envs, pool):
  examples = sft_data.agent_examples(envs, tokenizer, SETTINGS, pool, imperfect_share=0.5)
  oracle = [e for e in examples if e.meta["kind"] == "oracle"]
  imperfect = [e for e in examples if e.meta["kind"] == "imperfect"]
  assert sorted((e.meta["uid"], e.meta["arm"]) for e in oracle) == sorted(
      (env.uid, arm) for env in envs for arm in ("no_hint", "hint"))
  assert all(e.meta["return"] >= 0.99 for e in oracle)
  assert len(imperfect) == 4 and all(e.meta["return"] < 0.99 for e in imperfect)
  formatter = ChatFormatter(tokenizer)
  by_uid = {env.uid: env for env in envs}
  for ex in (oracle[2], oracle[3], imperfect[0]):
    env = by_uid[ex.meta["uid"]]
    hint = env.hint if ex.meta["arm"] == "hint" else None
    # Replay the recorded actions on a fresh episode: the same observations and return.
    (first,) = pool.reset([("replay", env.source, ex.meta["reset_seed"])])
    head = formatter.prompt_ids(prompts.agent_messages(first.observation, "<action>{}</action>",
                                                       hint))
    assert ex.tokens[:len(head)] == head
    total, reply_ids = 0.0, []
    for action in ex.meta["actions"][:ex.meta["turns"]]:
      (rec,) = pool.step([("replay", action)])
      total += rec.reward
      reply_ids.append(tokenizer.encode(f"<action> {action}</action>") + [tokenizer.eos_id])
      if rec.done:
        break
    pool.close_episodes(["replay"])
    assert total == pytest.approx(ex.meta["return"])
    runs = _segments(ex.loss_mask)
    assert [ex.tokens[a:b] for a, b in runs] == reply_ids  # loss on the replies only
    assert ("Privileged hint" in tokenizer.decode(head)) == (hint is not None)


def _holds(ids, part):
  return any(ids[i:i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def test_an_agent_reply_writes_the_action_word_in_the_pieces_of_the_observation(tokenizer, envs,
                                                                                pool):
  examples = sft_data.agent_examples(envs, tokenizer, SETTINGS, pool, imperfect_share=0.0)
  shown = 0
  for ex in examples:
    env = next(e for e in envs if e.uid == ex.meta["uid"])
    (first,) = pool.reset([("look", env.source, ex.meta["reset_seed"])])
    pool.close_episodes(["look"])
    word = " " + ex.meta["actions"][0].split()[0]
    if word not in first.observation:  # coins name their action only in the parse error
      continue
    shown += 1
    pieces = tokenizer.encode(word)
    start = ex.loss_mask.index(1)  # the first reply token
    prompt, reply = ex.tokens[:start], ex.tokens[start:]
    assert reply[len(tokenizer.encode("<action>")):][:len(pieces)] == pieces
    assert _holds(prompt, pieces)  # the reply's first pieces can be copied from the prompt
  assert shown >= 4


def test_oracle_episodes_at_more_reset_seeds_differ_in_their_reset(tokenizer, envs, pool):
  examples = sft_data.agent_examples(envs[:2], tokenizer, SETTINGS, pool, imperfect_share=0.0,
                                     resets=2)
  seeds = collections.defaultdict(set)
  for ex in examples:
    seeds[ex.meta["uid"], ex.meta["arm"]].add(ex.meta["reset_seed"])
  assert sorted(seeds) == sorted((e.uid, arm) for e in envs[:2] for arm in ("no_hint", "hint"))
  assert all(len(s) == 2 for s in seeds.values()) and len(examples) == 8



def test_peek_arms_differ_where_the_hint_carries_the_strategy(tokenizer, pool):
  """Peek games at 10 reset seeds: the hint arm of a game whose hint names the probe always
  probes, then answers the word shown (return 1.0); the other arms play untold most of the
  time, one answer with a listed word, and earn less."""
  games = [minigames.minigame("peek", i) for i in range(12)]
  probe = {g.uid: minigames.peek_probe(g.source) for g in games}
  told = [g for g in games if probe[g.uid] in g.hint][:1]
  untold = [g for g in games if probe[g.uid] not in g.hint][:2]
  envs = [variants.VariantEnv(g.uid, g.family, g.category, g.source, g.hint)
          for g in told + untold]
  examples = sft_data.agent_examples(envs, tokenizer, SETTINGS, pool, imperfect_share=0.0,
                                     resets=10)
  by = collections.defaultdict(list)
  for ex in examples:
    by[ex.meta["uid"] in {g.uid for g in told} and ex.meta["arm"] == "hint"].append(ex)
  assert len(by[True]) == 10 and len(by[False]) == 50
  assert all(ex.meta["kind"] == "oracle" and ex.meta["return"] == 1.0
             and ex.meta["actions"][0] == probe[ex.meta["uid"]] for ex in by[True])
  played = [ex for ex in by[False] if ex.meta["kind"] == "untold"]
  assert 0.5 <= len(played) / len(by[False]) <= 0.9  # 1 - UNTOLD_PROBE_SHARE = 0.7 expected
  assert all(len(ex.meta["actions"]) == 1 and ex.meta["actions"][0].startswith("answer ")
             for ex in played)
  assert all(ex.meta["kind"] == "oracle" for ex in by[False] if ex not in played)
  assert sum(ex.meta["return"] for ex in played) / len(played) < 0.5

def test_oracle_actions_come_from_live_sandbox_episodes(pool, envs):
  broken = envs[0].source.replace('return ["guess "', 'return 1 / 0 + ["guess "')
  pool.reset([("a", envs[0].source, 3), ("b", broken, 3)])
  a, b, c = pool.oracle_actions(["a", "b", "gone"])
  pool.close_episodes(["a", "b"])
  assert len(a.actions) == 1 and a.actions[0].startswith("guess ") and a.error_kind is None
  assert b.actions is None and b.error_kind == "exception" and "ZeroDivisionError" in b.error_detail
  assert c.actions is None and c.error_kind == "infra"


def test_corrupted_plans_differ_from_the_oracle():
  import numpy as np
  rng = np.random.default_rng(0)
  plans = [["answer 12 7"], ["roll east", "roll north"], ["accuse Plum rope hall"]]
  for plan, attempt in itertools.product(plans, range(sft_data.IMPERFECT_TRIES)):
    assert sft_data.corrupt(plan, attempt, rng) != plan
  plan = ["roll east", "roll north", "answer 12 7"]
  for _ in range(20):
    recovered, replaced = (sft_data.corrupt(plan, a, rng) for a in (0, 1))
    wrong = [i for i, a in enumerate(recovered) if a not in plan]  # a mistake, then the plan
    assert len(wrong) == 1 and recovered[:wrong[0]] + recovered[wrong[0] + 1:] == plan
    assert sum(a != b for a, b in zip(replaced, plan, strict=True)) == 1
  assert sft_data.corrupt(plan, sft_data.IMPERFECT_TRIES - 1, rng) == plan[:-1]
  assert replies.extract_action(replies.format_action("<action>{}</action>", "x {y}"),
                                "<action>{}</action>") == "x {y}"


def test_oracle_actions_through_the_split_pool_go_to_the_episode_owner(pool, envs):
  split = SplitPool(pool, LocalExchange())  # what run.build_pool gives the build and the loop
  split.reset([("a", envs[0].source, 3)])
  (a,) = split.oracle_actions(["a"])
  assert a.actions[0].startswith("guess ") and a.error_kind is None
  with pytest.raises(KeyError, match="never reset"):
    split.oracle_actions(["gone"])
  split.close_episodes(["a"])


# ------------------------------------------------------------------------------ copy rows
def test_copy_rows_put_the_loss_on_exactly_the_tokens_a_copy_predicts():
  rows = sft_data.copy_examples(512, 40, seed=3, min_span=8, max_span=30)
  assert [r.tokens for r in rows] == [r.tokens for r in sft_data.copy_examples(512, 40, seed=3,
                                                                              min_span=8,
                                                                              max_span=30)]
  plan = BucketPlan.build([(r.tokens, r.loss_mask) for r in rows], max_length=64,
                          tokens_per_step=64 * 40, min_bucket=64, bucket_step=64)
  arrays = plan.arrays(0)
  tokens, weights = arrays["tokens"][0], arrays["weights"][0]  # [R, 64]
  for r, i in enumerate(plan.batches[0]):
    span = rows[i].meta["span"]
    assert 8 <= span <= 30 and len(rows[i].tokens) == 2 * span
    assert min(rows[i].tokens) >= copy_test.FIRST_ORDINARY_ID and max(rows[i].tokens) < 512
    targets = np.flatnonzero(weights[r])
    # Each weighted target t is the token one span back, and its predecessor is too: an
    # induction head predicts it. The repeat's first token (nothing predicts it) is left out.
    assert list(targets) == list(range(span + 1, 2 * span))
    assert all(tokens[r, t] == tokens[r, t - span] and tokens[r, t - 1] == tokens[r, t - 1 - span]
               for t in targets)


def test_copy_rows_are_not_the_repeat_tests_rows():
  prefixes = {tuple(row[:8]) for row in copy_test.repeat_rows(4096)}
  rows = sft_data.copy_examples(4096, 500, seed=0)
  assert not prefixes & {tuple(r.tokens[:8]) for r in rows}


def test_copy_spans_that_cannot_be_copied_are_one_clear_error():
  with pytest.raises(ValueError, match=r"copy spans \[1, 4\]: expected 2 <= min_span <= max_span"):
    sft_data.copy_examples(512, 1, min_span=1, max_span=4)
