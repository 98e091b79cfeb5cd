"""Chat rendering equals transformers' apply_chat_template on the same template and messages."""

import json

import pytest
import tokenizers
import transformers
from tokenizers import models, pre_tokenizers, trainers

from spade_jax.tokenizer import (
  CHAT_SPECIAL_TOKENS,
  HFTokenizer,
  default_chat_template,
  load_tokenizer,
)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city, in °C.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers <a> & <b>.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                        "b": {"type": "number"}}}}},
]

CONVERSATION = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Weather in Zürich, and 2+3?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two tools are needed.",
     "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}},
         {"type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "5"},
    {"role": "assistant",
     "content": "<think>\nBoth results are in.\n</think>\n\nIt is 21 °C; 2+3=5."},
    {"role": "user", "content": "Thanks!", "tool_calls": None},
    {"role": "assistant", "content": "You're welcome.", "thinking": "Be polite."},
]

# A second, unrelated template exercising the environment: loop controls, namespace, dict(),
# tojson options, raise_exception guard and special-token variables.
OTHER_TEMPLATE = (
    "{% set ns = namespace(n=0) %}{{ bos_token }}"
    "{% for m in messages %}{% if m.role == 'tool' %}{% continue %}{% endif %}"
    "{% set ns.n = ns.n + 1 %}[{{ ns.n }}:{{ m.role | upper }}]\n  {{ m.content | trim }}\n"
    "{% if m.reasoning_content is defined %}{{ dict(r=m.reasoning_content) | tojson(indent=2) }}"
    "{% endif %}{% if m.role not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role') }}{% endif %}{% endfor %}"
    "{% if tools %}{{ tools | tojson(sort_keys=True) }}{% endif %}"
    "{% if add_generation_prompt %}{{ eos_token }}>>{% endif %}")


def _train_tokenizer() -> tokenizers.Tokenizer:
  tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", *CHAT_SPECIAL_TOKENS],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator([json.dumps(TOOLS), json.dumps(CONVERSATION)] * 4, trainer)
  return tok


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
  """(transformers tokenizer, our tokenizer) over the same files, shipped template."""
  directory = tmp_path_factory.mktemp("tok")
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=_train_tokenizer(), eos_token="<|im_end|>", pad_token="<|endoftext|>",
      bos_token="<|endoftext|>", unk_token="<unk>")
  fast.chat_template = default_chat_template()
  fast.save_pretrained(directory)
  return transformers.AutoTokenizer.from_pretrained(directory), HFTokenizer(directory), directory


@pytest.mark.parametrize("kwargs", [
    dict(tools=TOOLS, add_generation_prompt=True),
    dict(tools=None, add_generation_prompt=False),
    dict(tools=TOOLS, add_generation_prompt=True, enable_thinking=False),
])
@pytest.mark.parametrize("cut", [2, 6, len(CONVERSATION)])
def test_shipped_template_matches_transformers(hf_pair, kwargs, cut):
  theirs, ours, _ = hf_pair
  messages = CONVERSATION[:cut]
  expected = theirs.apply_chat_template(messages, tokenize=False, **kwargs)
  assert ours.apply_chat_template(messages, **kwargs) == expected
  assert ours.encode(expected) == theirs.encode(expected, add_special_tokens=False)


def test_shipped_template_qwen3_format(hf_pair):
  _, ours, _ = hf_pair
  text = ours.apply_chat_template(CONVERSATION[:6], tools=TOOLS)
  assert text.startswith("<|im_start|>system\nYou are a careful assistant.\n\n# Tools\n")
  assert json.dumps(TOOLS[0], ensure_ascii=False) in text
  assert ('<|im_start|>assistant\n<think>\nTwo tools are needed.\n</think>\n\n<tool_call>\n'
          '{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n<tool_call>\n'
          '{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>\n') in text
  assert ('<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response>\n<tool_response>\n'
          '5\n</tool_response><|im_end|>\n') in text
  assert text.endswith("It is 21 °C; 2+3=5.<|im_end|>\n<|im_start|>assistant\n")
  # Reasoning of turns before the last user message is dropped.
  assert "Both results" not in ours.apply_chat_template(CONVERSATION[:7])


def test_other_template_from_tokenizer_config_matches(hf_pair, tmp_path):
  """transformers-4 layout: template inside tokenizer_config.json, no chat_template.jinja."""
  theirs, _, directory = hf_pair
  (tmp_path / "tokenizer.json").write_text((directory / "tokenizer.json").read_text())
  config = {"eos_token": {"content": "<|im_end|>", "special": True}, "bos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>", "chat_template": OTHER_TEMPLATE}
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
  ours = load_tokenizer(tmp_path)
  for kwargs in (dict(tools=TOOLS, add_generation_prompt=True),
                 dict(add_generation_prompt=False)):
    expected = theirs.apply_chat_template(CONVERSATION, chat_template=OTHER_TEMPLATE,
                                          tokenize=False, **kwargs)
    assert ours.apply_chat_template(CONVERSATION, **kwargs) == expected
  with pytest.raises(Exception, match="bad role"):
    ours.apply_chat_template([{"role": "robot", "content": "x"}])


def test_special_ids_and_roundtrip(hf_pair):
  theirs, ours, _ = hf_pair
  assert ours.eos_id == theirs.eos_token_id == ours.token_to_id("<|im_end|>")
  assert ours.pad_id == theirs.pad_token_id
  assert ours.vocab_size == len(theirs)
  text = ours.apply_chat_template(CONVERSATION, tools=TOOLS)
  assert ours.decode(ours.encode(text)) == text
  assert ours.encode("<|im_start|>") == [ours.token_to_id("<|im_start|>")]


def test_template_sandbox_blocks_internals(hf_pair, tmp_path):
  _, ours, directory = hf_pair
  (tmp_path / "tokenizer.json").write_text((directory / "tokenizer.json").read_text())
  (tmp_path / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
  with pytest.raises(Exception, match="unsafe|__class__|attribute"):
    load_tokenizer(tmp_path).apply_chat_template([{"role": "user", "content": "x"}])
