"""Token-exact multi-turn trajectories across thinking blocks and tool turns.

A 4-turn tool conversation (call, answer, call, answer; every reply opens with <think>) is
played through the episode runner with the Qwen3 chat template. Re-rendering the finished
conversation with the template gives a DIFFERENT token sequence: the template strips the
reasoning of assistant turns before the last user message. The episode keeps what the
engine actually saw and sampled, one growing sequence, and that is what the trainer gets.
"""

import json

import pytest

from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.sandbox.fake import FakePool
from spade_jax.selfplay.batching import agent_samples, build_train_batch
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.episodes import EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.timing import Timings
from spade_jax.tokenizer import load_tokenizer
from tests.selfplay.selfplay_fakes import REPLY_LOGPROB, ByteTokenizer

# Both render with the bundled Qwen3 chat template; "tiny" is the SentencePiece tokenizer.
TOKENIZERS = {"bytes": ByteTokenizer(), "tiny": load_tokenizer("tiny")}

SHOP = '''\
import json


class Prices:
  max_turns = 6
  tools = [{"type": "function", "function": {"name": "get_price", "description": "price",
            "parameters": {"type": "object", "properties": {"item": {"type": "string"}},
                           "required": ["item"]}}}]

  def reset(self, seed=None):
    self.prices = {"apple": 3 + seed % 5, "pear": 11 + seed % 3}
    self.asked = ["apple", "pear"]
    return "What does an apple cost?", {}

  def step(self, action):
    if isinstance(action, dict):
      item = action["arguments"].get("item")
      return json.dumps({"price": self.prices.get(item)}), 0.0, False, False, {}
    if action.strip() != str(self.prices[self.asked[0]]):
      return "That is not it.", 0.0, False, False, {}
    self.asked.pop(0)
    if not self.asked:
      return "Thanks!", 0.5, True, False, {}
    return "And a pear?", 0.5, False, False, {}
'''


def _reply(turn: int, history: str) -> str:
  if turn in (0, 2):
    item = "apple" if turn == 0 else "pear"
    call = json.dumps({"name": "get_price", "arguments": {"item": item}})
    return (f"<think>\nreasoning {turn + 1}: look the {item} up\n</think>\n\n"
            f"<tool_call>\n{call}\n</tool_call>")
  price = history.rsplit('{"price": ', 1)[1].split("}")[0]
  return f"<think>\nreasoning {turn + 1}: the tool said {price}\n</think>\n\n{price}"


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_training_uses_the_sampled_sequence_not_the_template_rerender(name):
  tok = TOKENIZERS[name]
  histories, replies = [], []

  def reply_fn(cid, history, params):
    text = _reply(len(replies), tok.decode(history))
    ids = tok.encode(text) + [tok.eos_id]
    histories.append(list(history))
    replies.append(ids)
    return ids, [REPLY_LOGPROB] * len(ids)

  spec = EpisodeSpec((0, "p", "no_hint", 0), "p", "no_hint", SHOP, None, 7, 1, 8)
  params = SamplingParams(max_new_tokens=256, stop_token_ids=tok.stop_ids)
  (ep,) = play_episodes(FakeEngine(reply_fn, steps_per_poll=64), FakePool(), ChatFormatter(tok),
                        [spec], EpisodeSettings("<action>{}</action>", params), Timings())
  assert ep.terminated and ep.turns == 4 and ep.episode_return == 1.0
  assert [m["role"] for m in ep.messages[2:]] == ["assistant", "tool", "assistant", "user",
                                                  "assistant", "tool", "assistant", "user"]

  # One sequence, never forked: each turn's context extends the previous turn's context
  # plus its sampled reply, and the episode is the last context plus the last reply.
  for k in range(1, 4):
    assert histories[k][:len(histories[k - 1]) + len(replies[k - 1])] == (
        histories[k - 1] + replies[k - 1])
  assert ep.tokens == histories[-1] + replies[-1]
  sampled = [t for t, m in zip(ep.tokens, ep.loss_mask, strict=True) if m]
  assert sampled == sum(replies, [])

  # The template's re-rendering of the same conversation differs: it drops the reasoning of
  # the turns before the last user message (turns 1-2 here) and keeps the later ones.
  rerender = tok.encode(tok.apply_chat_template(ep.messages[:-1], tools=ep.tools))[:-1]
  first_reply = ep.loss_mask.index(1)
  assert rerender[:first_reply] == ep.tokens[:first_reply]  # same prompt
  assert rerender[first_reply] != ep.tokens[first_reply]  # forks at the first <think>
  text, sampled_text = tok.decode(rerender), tok.decode(ep.tokens)
  assert all(f"reasoning {k}" in sampled_text for k in (1, 2, 3, 4))
  assert [f"reasoning {k}" in text for k in (1, 2, 3, 4)] == [False, False, True, True]
  assert len(rerender) < len(ep.tokens)

  # The trainer's row is the sampled sequence, loss exactly on the sampled tokens.
  batch = build_train_batch(agent_samples([ep], step=0, train_on_hint_arm=False),
                            pad_id=tok.pad_id)
  n = len(ep.tokens)
  assert batch.tokens[0, :n].tolist() == ep.tokens
  assert batch.tokens[0, :n][batch.loss_mask[0, :n] == 1].tolist() == sum(replies, [])
  assert (batch.behaviour_logprobs[0][batch.loss_mask[0] == 1] == REPLY_LOGPROB).all()
