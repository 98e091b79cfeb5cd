"""Greedy parity with transformers (dense and MoE), the CLI and bad-input errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

from spade_jax.engine.api import Request, SamplingParams
from spade_jax.engine.conversation import SlotConversationEngine
from spade_jax.engine.generate import generate, main
from tests.engine import engine_testlib as lib

PROMPTS = [[3, 17, 99, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]
NEW = 12
TOL = 1e-4  # fp32 logprob agreement with transformers' logits


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """kind -> (directory, transformers model, our model loaded from the directory)."""
  out = {}
  for seed, kind in enumerate(("dense", "moe")):
    directory = tmp_path_factory.mktemp(kind)
    out[kind] = (directory,) + lib.write_checkpoint(directory, kind, seed=seed)
  return out


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_greedy_equals_transformers_generate(checkpoints, kind):
  _, hf, model = checkpoints[kind]
  # Single prompts per call: the shapes match the CLI test's, so the compile is shared.
  for prompt in PROMPTS:
    (ours,) = generate(model, [prompt], NEW, temperature=0.0)
    tokens, logits = lib.hf_greedy(hf, prompt, NEW)
    assert ours.tokens == tokens
    assert ours.finish_reason == "length"
    expected = lib.log_softmax(logits)[np.arange(NEW), tokens]
    np.testing.assert_allclose(ours.logprobs, expected, atol=TOL, rtol=0)


def test_cli_prints_tokens_logprobs_and_text_json(checkpoints, capsys):
  prompt_ids = ",".join(map(str, PROMPTS[0]))
  main(["--checkpoint", str(checkpoints["dense"][0]), "--prompt-ids", prompt_ids,
                "--max-new-tokens", str(NEW), "--temperature", "0"])
  last = capsys.readouterr().out.strip().splitlines()[-1]
  out = json.loads(last)
  tokens, _ = lib.hf_greedy(checkpoints["dense"][1], PROMPTS[0], NEW)
  assert out["tokens"] == tokens and len(out["logprobs"]) == NEW and out["text"] is None


def test_bad_input_raises_clear_errors(checkpoints, tmp_path):
  model = checkpoints["dense"][2]
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    generate(model, [[1, 2], []], 4)
  with pytest.raises(ValueError, match="max_new_tokens must be > 0"):
    generate(model, [[1, 2]], 0)
  with pytest.raises(FileNotFoundError, match="no such directory"):
    main(["--checkpoint", str(tmp_path / "missing"), "--prompt-ids", "1",
                  "--max-new-tokens", "2"])
  engine = SlotConversationEngine(model, num_slots=1, max_cache_len=8, prefill_buckets=(8,))
  with pytest.raises(ValueError, match="max_cache_len=8"):
    engine.submit(Request("long", list(range(8)), SamplingParams(max_new_tokens=1)))
  with pytest.raises(ValueError, match="max_new_tokens must be > 0"):
    engine.submit(Request("zero", [1], SamplingParams(max_new_tokens=-1)))
  with pytest.raises(ValueError, match="non-empty prompt"):
    engine.submit(Request("empty", [], SamplingParams(max_new_tokens=1)))
  with pytest.raises(ValueError, match="token ids must be in"):
    engine.submit(Request("oov", [lib.VOCAB], SamplingParams(max_new_tokens=1)))
  with pytest.raises(ValueError, match="detokenize"):
    engine.submit(Request("s", [1], SamplingParams(max_new_tokens=1, stop_strings=("x",))))


def test_sharded_engine_matches_single_device(checkpoints):
  """Model and KV cache on a (data 2, fsdp 2, tensor 2) mesh of 8 CPU devices."""
  from spade_jax.model import hf_io, make_mesh  # pylint: disable=g-import-not-at-top
  directory, hf, _ = checkpoints["dense"]
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  sharded = hf_io.from_pretrained(directory, dtype="float32", mesh=mesh)
  prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0][::-1], PROMPTS[1][:5]]
  got = generate(sharded, prompts, NEW, temperature=0.0, mesh=mesh)
  for prompt, result in zip(prompts, got, strict=True):
    assert result.tokens == lib.hf_greedy(hf, prompt, NEW)[0]


def test_python_m_runs_the_module_without_a_runpy_warning():
  """`spade_jax.engine.generate` names the module only (the package does not re-export the
  function over it), so runpy does not find it imported before it runs."""
  proc = subprocess.run([sys.executable, "-m", "spade_jax.engine.generate", "--help"],
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 0 and "usage: python -m spade_jax.engine.generate" in proc.stdout
  assert "RuntimeWarning" not in proc.stderr, proc.stderr
