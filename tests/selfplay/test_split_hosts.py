"""Sandbox work split across processes: each runs half, all build the same batch.

Two "processes" are two threads, each with its own scripted engine, its own FakePool
wrapped in `SplitPool`, and a thread-backed fake of the exchange that jax.distributed gives
the real run (spade_jax/multihost.py). Their loops must produce exactly what one process
produces alone on the same seeds, while each pool runs half of the validations, resets and
steps. (tests/launch/test_multiprocess_e2e.py runs the real thing with two processes.)
"""

import threading

from spade_jax.sandbox.fake import FakePool
from spade_jax.sandbox.split import LocalExchange, SplitPool
from spade_jax.selfplay.loop import SelfPlayLoop
from tests.selfplay.selfplay_fakes import (
  ByteTokenizer,
  FakeTrainer,
  ListCorpus,
  ScriptedPolicy,
  designer_reply,
  make_engine,
  make_settings,
  seed_library,
)

TOK = ByteTokenizer()
DESIGNS = {0: designer_reply("A"), 1: designer_reply("B"), 2: "prose, not code"}
STEPS = 3


def agent_rule(tag, hinted, step, turn):
  if turn == 0 and tag == "A":
    return "<action>probe</action>"  # a second turn: steps go to the episode's owner
  return "<action>win</action>" if hinted or step == 2 else "<action>lose</action>"


class CountingPool(FakePool):
  """Counts the loop's calls (the episodes a validation plays through reset and step aside)."""

  def __init__(self):
    super().__init__()
    self.calls = {"validate": 0, "reset": 0, "step": 0}
    self.validating = False

  def validate(self, sources):
    self.calls["validate"] += len(sources)
    self.validating = True
    try:
      return super().validate(sources)
    finally:
      self.validating = False

  def reset(self, episodes):
    self.calls["reset"] += 0 if self.validating else len(episodes)
    return super().reset(episodes)

  def step(self, actions):
    self.calls["step"] += 0 if self.validating else len(actions)
    return super().step(actions)


class ThreadExchange:
  """The exchange between threads: everyone posts, waits for all, reads all."""

  def __init__(self, rank, board):
    self.rank, self.size, self.board = rank, len(board["slots"]), board

  def all_gather(self, value):
    self.board["slots"][self.rank] = value
    self.board["barrier"].wait()
    out = list(self.board["slots"])
    self.board["barrier"].wait()  # nobody posts the next round before everyone has read
    return out


def run_loop(exchange):
  pool = CountingPool()
  loop = SelfPlayLoop(make_settings(num_envs=3, fill_from_memory=True),
                      engine=make_engine(ScriptedPolicy(TOK, DESIGNS, agent_rule)),
                      pool=SplitPool(pool, exchange), tokenizer=TOK, trainer=FakeTrainer(),
                      corpus=ListCorpus(), seed_envs=seed_library())
  records = [loop.step().to_dict() for _ in range(STEPS)]
  return {"records": [{**r, "timings": None} for r in records], "pool": pool.calls,
          "batches": loop.trainer.batches, "state": loop.state_dict()}


def test_two_processes_each_run_half_and_match_one_process():
  alone = run_loop(LocalExchange())
  board = {"slots": [None, None], "barrier": threading.Barrier(2, timeout=60)}
  results, errors = [None, None], []

  def worker(rank):
    try:
      results[rank] = run_loop(ThreadExchange(rank, board))
    except Exception as e:  # noqa: BLE001 - re-raised below with the rank
      errors.append((rank, e))
      board["barrier"].abort()

  threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=120)
  assert not errors, errors
  total = alone["pool"]
  assert total["validate"] > 0 and total["step"] > total["reset"] > 0
  for name, count in total.items():  # balanced: each ran half of every kind of call
    assert sorted(r["pool"][name] for r in results) == [count // 2, count - count // 2], name
  for r in results:
    assert r["records"] == alone["records"] and r["state"] == alone["state"]
    assert len(r["batches"]) == len(alone["batches"]) == STEPS
    for a, b in zip(r["batches"], alone["batches"], strict=True):
      for field in ("tokens", "loss_mask", "behaviour_logprobs", "rewards", "group_ids"):
        assert (getattr(a, field) == getattr(b, field)).all(), field
