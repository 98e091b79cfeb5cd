"""FakeEngine keeps the ConversationEngine semantics the self-play loop relies on."""

import pytest

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.engine.fake import FakeEngine


def _drain(engine):
  out = []
  while engine.pending():
    out.extend(engine.poll())
  return out


def _counting_reply(cid, history, params):
  return list(range(100, 100 + params.max_new_tokens + 5))


def test_history_persists_and_short_turns_finish_first():
  seen = []

  def reply(cid, history, params):
    seen.append((cid, history))
    return [50 + len(history)] * (3 if cid == "short" else 20)

  engine = FakeEngine(reply, num_slots=2, steps_per_poll=4)
  engine.submit(Request("long", [1, 2], SamplingParams(max_new_tokens=20)))
  engine.submit(Request("short", [3], SamplingParams(max_new_tokens=20)))
  first = engine.poll()
  assert [c.conversation_id for c in first] == ["short"]
  assert first[0].tokens == [51, 51, 51] and first[0].finish_reason == "stop"
  engine.submit(Request("short", [9], SamplingParams(max_new_tokens=20)))
  done = _drain(engine)
  assert {c.conversation_id for c in done} == {"short", "long"}
  assert seen[-1] == ("short", (3, 51, 51, 51, 9))
  assert engine.history("long") == (1, 2) + (52,) * 20


def test_stops_and_lengths_match_real_engine_conventions():
  engine = FakeEngine(_counting_reply, detokenize=lambda ids: " ".join(map(str, ids)))
  engine.submit(Request("ids", [1], SamplingParams(max_new_tokens=10, stop_token_ids=(103,))))
  engine.submit(Request("str", [1], SamplingParams(max_new_tokens=10, stop_strings=("102 1",))))
  engine.submit(Request("len", [1], SamplingParams(max_new_tokens=4)))
  got = {c.conversation_id: c for c in _drain(engine)}
  assert got["ids"].tokens == [100, 101, 102, 103] and got["ids"].finish_reason == "stop"
  assert got["str"].tokens == [100, 101, 102, 103] and got["str"].finish_reason == "stop"
  assert got["len"].tokens == [100, 101, 102, 103] and got["len"].finish_reason == "length"
  assert got["len"].logprobs == [-1.0] * 4


def test_cache_full_release_and_bad_input():
  engine = FakeEngine(lambda c, h, p: ([7] * 30, [-0.5] * 30), max_cache_len=12)
  with pytest.raises(ValueError, match="non-empty prompt"):
    engine.submit(Request("a", [], SamplingParams(max_new_tokens=4)))
  with pytest.raises(ValueError, match="max_new_tokens"):
    engine.submit(Request("a", [1], SamplingParams(max_new_tokens=0)))
  with pytest.raises(ValueError, match="max_cache_len=12"):
    engine.submit(Request("a", list(range(12)), SamplingParams(max_new_tokens=4)))
  engine.submit(Request("a", [1, 2], SamplingParams(max_new_tokens=20)))
  (c,) = _drain(engine)
  assert c.finish_reason == "cache_full" and len(c.tokens) == 10 and c.logprobs == [-0.5] * 10
  engine.release("a")
  with pytest.raises(KeyError):
    engine.release("a")
