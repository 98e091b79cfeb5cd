"""Double buffering in SlotConversationEngine: each decode block is dispatched before the host
reads the one before it, the episodes' sandbox round runs while a block decodes, and the
turns come out as they do without the overlap."""

import collections

import jax
import numpy as np
import pytest
from flax import nnx

from spade_jax.engine import slot_engine
from spade_jax.engine.api import Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.slot_engine import SlotEngine
from spade_jax.model import make_mesh
from spade_jax.model.config import ModelConfig
from spade_jax.model.sharding import state_shardings
from spade_jax.model.testing import random_model
from spade_jax.sandbox.api import EnvStep
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.episodes import EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.timing import Timings
from tests.selfplay.selfplay_fakes import ByteTokenizer


class RandomModelTokenizer(ByteTokenizer):
  """The byte tokenizer, reading the ids it leaves unassigned (9-15), which a random model
  samples too, as "?"."""

  def decode(self, ids) -> str:
    return super().decode([self.OFFSET + ord("?") if 9 <= i < self.OFFSET else i for i in ids])


TOK = RandomModelTokenizer()
CFG = ModelConfig(vocab_size=TOK.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                  num_kv_heads=1, head_dim=16, intermediate_size=48)
TOL = 1e-5  # float32 log-probs of the same tokens computed beside other rows
# 4 slots for 6 conversations (queueing, eviction); decode widths 2 or 4 (slots moved down
# and the state resized while a block is in flight); 4-step blocks, replies end mid-block;
# one append program (64-token chunks, 4 rows); up to 24 stop ids a turn.
ENGINE = dict(num_slots=4, max_cache_len=512, prefill_buckets=(64,), prefill_tokens=256,
              decode_steps_per_poll=4, decode_widths=(2,), decode_lengths=(), max_stop_ids=24)


@pytest.fixture(scope="module")
def model():
  return random_model(CFG, seed=1, std=0.5)  # peaked logits: greedy is clear-cut


class Events:
  """The order of decode dispatches, host reads of their tokens and sandbox steps, recorded
  around slot_engine._generate, jax.device_get (what host_get reads with on one host) and
  the pool."""

  def __init__(self, monkeypatch):
    self.log: list[tuple[str, int]] = []
    self._blocks = []  # tokens [S, N] of every dispatched block
    generate, device_get = slot_engine._generate, jax.device_get

    def dispatch(*args, **kwargs):
      out = generate(*args, **kwargs)
      self._blocks.append(out[1])
      self.log.append(("dispatch", len(self._blocks) - 1))
      return out

    def read(x):
      self.log += [("read", i) for i, b in enumerate(self._blocks) if x is b]
      return device_get(x)

    monkeypatch.setattr(slot_engine, "_generate", dispatch)
    monkeypatch.setattr(jax, "device_get", read)

  def serial(self) -> list[str]:
    """Every read of a block that came before the next block was dispatched, and every
    sandbox step taken while no dispatched block was left unread (the device idle)."""
    dispatched, read, out = -1, -1, []
    for kind, i in self.log:
      if kind == "dispatch":
        dispatched = i
      elif kind == "read":
        read = max(read, i)
        if dispatched <= i:
          out.append(f"block {i} read before block {i + 1} was dispatched")
      elif dispatched <= read:
        out.append(f"sandbox step after block {read} was read, none dispatched since")
    return out


class ScriptedPool:
  """The sandbox's side of an episode: observations naming the step, `turns` steps each."""

  def __init__(self, log: list, turns: int):
    self.log, self.turns = log, turns
    self.steps = collections.Counter()

  def reset(self, episodes):
    return [EnvStep(f"task {seed}") for _, _, seed in episodes]

  def step(self, actions):
    self.log.append(("sandbox", len(actions)))
    out = []
    for key, action in actions:
      self.steps[key] += 1
      out.append(EnvStep(f"observation {self.steps[key]} of {len(action)}", reward=0.1,
                         terminated=self.steps[key] >= self.turns))
    return out

  def close_episodes(self, keys):
    pass


def play(engine, log: list) -> list[tuple]:
  """Six 3-turn episodes (12-token replies; the whole reply is the action) -> each
  episode's tokens, rewards, turns and log-probs."""
  specs = [EpisodeSpec(key=g, env_uid="e", arm="no_hint", source="", hint=None, seed=g,
                       sample_seed=7 * g, max_turns=3) for g in range(6)]
  settings = EpisodeSettings("{}", SamplingParams(12, temperature=0.0, stop_token_ids=(2,)))
  episodes = play_episodes(engine, ScriptedPool(log, turns=3), ChatFormatter(TOK), specs,
                           settings, Timings())
  assert all(e.playable and e.turns > 1 for e in episodes)
  return [(e.tokens, e.rewards, e.turns, e.logprobs) for e in episodes]


def test_blocks_and_sandbox_rounds_overlap_with_the_next_block(model, monkeypatch):
  """The default engine dispatches block n+1 before reading block n, so the episodes'
  sandbox round runs while a block decodes; without the overlap every block is read before
  the next one, and the episodes are the same."""
  events = Events(monkeypatch)
  played = play(SlotConversationEngine(model, **ENGINE), events.log)
  reads = sum(kind == "read" for kind, _ in events.log)
  assert reads > 6 and events.serial() == []
  events.log.clear()
  serial = play(SlotConversationEngine(model, overlap=False, **ENGINE), events.log)
  assert events.serial()
  assert [e[:3] for e in serial] == [e[:3] for e in played]
  for a, b in zip(serial, played, strict=True):
    np.testing.assert_allclose(b[3], a[3], rtol=0, atol=TOL)


def converse(engine, turns: dict) -> dict:
  """Each conversation's turns [(new tokens, params)], the next submitted when a reply comes
  back -> {(conversation, turn): Completion}."""
  out, nxt = {}, collections.Counter()
  for cid, t in turns.items():
    engine.submit(Request(cid, *t[0]))
  while engine.pending():
    for c in engine.poll():
      cid = c.conversation_id
      out[cid, nxt[cid]] = c
      nxt[cid] += 1
      if nxt[cid] < len(turns[cid]):
        engine.submit(Request(cid, *turns[cid][nxt[cid]]))
      else:
        engine.release(cid)
  return out


def test_overlap_samples_the_turns_of_the_serial_engine(model):
  """Greedy and seeded turns ending at stop ids (on the device, mid-block), stop strings
  (on the host: the device decodes past them) and their budgets, over 4 slots: the same
  tokens and finish reasons with and without the overlap, and the same log-probs up to
  float32 rounding (TOL: a turn's rows share an append or a decode width with other turns,
  which the overlap admits a poll later)."""
  rng = np.random.default_rng(0)
  prompt = lambda n: rng.integers(16, TOK.vocab_size, n).tolist()
  stops = [dict(stop_token_ids=tuple(range(16, 40))), dict(stop_strings=("3>",)), {}]
  turns = {c: [(prompt(n), SamplingParams(int(rng.integers(3, 14)), temperature=t, seed=c,
                                          **stops[c % 3]))
               for n in (int(rng.integers(5, 90)), 7, 20)]
           for c, t in enumerate((0.0, 0.0, 0.0, 1.0, 1.0, 0.7))}
  detok = lambda ids: "".join(f"<{t}>" for t in ids)
  serial, overlap = (converse(SlotConversationEngine(model, detokenize=detok, overlap=o,
                                                     **ENGINE), turns)
                     for o in (False, True))
  assert len(serial) == 18 and {c.finish_reason for c in serial.values()} == {"stop", "length"}
  assert {k: (c.tokens, c.finish_reason) for k, c in overlap.items()} == {
      k: (c.tokens, c.finish_reason) for k, c in serial.items()}
  for k, c in serial.items():
    np.testing.assert_allclose(overlap[k].logprobs, c.logprobs, rtol=0, atol=TOL)



def test_what_the_host_reads_is_replicated_on_every_device(model):
  """On a (data 2, fsdp 2) mesh an append's first tokens and a decode block's outputs come
  out replicated, so on several hosts each reads its own copy while the next block runs
  (a sharded output needs an all-gather, queued behind that block)."""
  mesh = make_mesh({"data": 2, "fsdp": 2}, jax.devices()[:4])
  graphdef, params = nnx.split(model)
  sharded = nnx.merge(graphdef, jax.device_put(params, state_shardings(params, mesh)))
  engine = SlotEngine(sharded, mesh=mesh, num_slots=4, max_cache_len=64, prefill_buckets=(16,),
                      decode_steps=4, decode_widths=(), decode_lengths=())
  sp = [SamplingParams(8, temperature=0.0)] * 4
  state, tok, lp = engine.append(engine.params, engine.init_decode_state(), range(4), [0] * 4,
                                 [[20 + i] * 5 for i in range(4)], sp, [8] * 4, read=False)
  _, block = engine.generate(engine.params, state, np.ones(4, bool), read=False)
  assert all(x.is_fully_replicated for x in (tok, lp, block.tokens, block.logprobs, block.valid))
