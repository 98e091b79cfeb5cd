"""`python -m spade_jax.eval run` on a tiny random Hugging Face checkpoint: both files written."""

import json

from spade_jax.eval import __main__ as cli
from spade_jax.model import get_preset, save_pretrained
from spade_jax.model.testing import random_model


def test_run_writes_records_and_summary(tmp_path):
  ckpt = tmp_path / "tiny"
  save_pretrained(random_model(get_preset("tiny")), ckpt)
  out = tmp_path / "run" / "eval.jsonl"
  cli.main(["run", "--checkpoint", str(ckpt), "--tokenizer", "tiny", "--suite",
            "humaneval,seed_games_heldout", "--limit", "1", "--samples", "1",
            "--max-new-tokens", "4", "--num-slots", "4", "--max-cache-len", "2048",
            "--prefill-buckets", "1024", "--out", str(out), "--quiet"])
  lines = [json.loads(x) for x in out.read_text().splitlines()]
  assert [x["suite"] for x in lines] == ["humaneval", "seed_games_heldout"]
  assert all(x["responses"] and len(x["scores"]) == len(x["responses"]) for x in lines)
  assert len(lines[1]["responses"]) == 2  # one episode per arm
  summary = json.loads((tmp_path / "run" / "eval.summary.json").read_text())
  assert set(summary["suites"]) == {"humaneval", "seed_games_heldout"}
  for s in summary["suites"].values():
    assert s["n"] == 1 and 0.0 <= s["value"] <= 1.0
