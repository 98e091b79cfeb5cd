"""The starter tokenizer: deterministic, lossless on code, Qwen3 control tokens, and the same
chat rendering and ids through spade_jax's loader and transformers' AutoTokenizer."""

import json

import pytest
import tokenizers
import transformers

from proj.starter import tokenizer_train
from spade_jax.envs.library import load_seed_library
from spade_jax.selfplay import prompts
from spade_jax.tokenizer import CHAT_SPECIAL_TOKENS, load_tokenizer

SEEDS = load_seed_library("games")
TEXTS = [s.source for s in SEEDS[:12]] * 2 + [s.hint for s in SEEDS]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
  tok = tokenizer_train.train(TEXTS, 700)
  return tokenizer_train.save(tok, tmp_path_factory.mktemp("tok"))


def test_training_is_deterministic(tok_dir):
  saved = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
  assert tokenizer_train.train(TEXTS, 700).to_str() == saved.to_str()
  added = {t["content"]: t["special"] for t in json.loads(saved.to_str())["added_tokens"]}
  assert added == {t: t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
                   for t in CHAT_SPECIAL_TOKENS}  # as in Qwen3's tokenizer.json


def test_round_trip_control_tokens_digits_and_indentation(tok_dir):
  tok = load_tokenizer(tok_dir)
  assert tok.vocab_size == 700
  for seed in SEEDS:  # held-out games too: nothing is lost on unseen code
    assert tok.decode(tok.encode(seed.source)) == seed.source
  for i, token in enumerate(CHAT_SPECIAL_TOKENS):
    assert tok.token_to_id(token) == i
    assert tok.encode(f"a{token}b")[1] == i  # matched whole inside text
  pieces = {tok.decode([i]) for seed in SEEDS for i in tok.encode(seed.source)}
  with_digits = {p for p in pieces if any(c.isdigit() for c in p)}
  assert with_digits and all(len(p) == 1 for p in with_digits)  # numbers spelt digit by digit
  indented = tok.encode("\n        return")
  assert len(indented) <= 3  # a run of 8 spaces is a learned piece, not 8 tokens
  assert tok.eos_id == tok.token_to_id("<|im_end|>")
  assert tok.pad_id == tok.token_to_id("<|endoftext|>")


def test_chat_template_and_ids_agree_with_transformers(tok_dir):
  ours = load_tokenizer(tok_dir)
  theirs = transformers.AutoTokenizer.from_pretrained(tok_dir)
  seed = SEEDS[0]
  view = prompts.MemoryView(seed.category, seed.source, seed.hint, 0.5, 1.0, 0.5)
  conversations = [
      prompts.designer_messages("planning", "Kepler's third law relates periods.", [view]),
      prompts.agent_messages("You see 3 coins.", "<action>{}</action>", seed.hint)
      + [{"role": "assistant", "content": "<action>2</action>"},
         {"role": "user", "content": "Reward 1."}],
  ]
  for messages in conversations:
    text = ours.apply_chat_template(messages)
    assert text == theirs.apply_chat_template(messages, tokenize=False,
                                              add_generation_prompt=True)
    assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"]
    assert theirs.decode(ours.encode(text)) == text
  assert theirs.eos_token == "<|im_end|>" and theirs.pad_token == "<|endoftext|>"
