"""`build --size ci --config starter_ci` end to end in real subprocesses: SIGKILLed inside
pretraining, run again (it resumes from the checkpoint, replaying the same data); the result
loads in spade_jax and in transformers with matching logits, and two steps of the loop
(proj/starter/configs/starter_ci.py) from it play, score and train on designs it wrote."""

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import transformers

from proj.starter.build import config_path
from proj.starter.warm import WARM_SIZES
from spade_jax.model import from_pretrained
from spade_jax.tokenizer import load_tokenizer

REPO = pathlib.Path(__file__).resolve().parents[3]
# A build and a loop at their real size (`make test-slow`); each fixture runs for minutes,
# longer beside the other slow files.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
TOL = 1e-4


def _env(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one device: less compiling
  return {**env, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
          "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "xla")}


def _log(out):
  path = out / "stages" / "pretrain" / "log.jsonl"
  return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def _killed_in_pretraining(out, env):
  cmd = [*BUILD, "--out", str(out)]
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if (out / "stages" / "pretrain" / "checkpoints" / "10").is_dir() and len(_log(out)) >= 12:
      proc.send_signal(signal.SIGKILL)
      break
    time.sleep(0.02)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
  assert not (out / "stages" / "pretrain.done.json").exists()
  return cmd, {row["step"]: row["loss"] for row in _log(out)}


def _target_loss(model_dir, examples):
  """Mean next-token loss on the examples' target tokens, in transformers."""
  hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
  total = count = 0.0
  with torch.no_grad():
    for ex in examples:
      ids = torch.tensor([ex["tokens"]])
      logp = torch.log_softmax(hf(ids).logits[0, :-1], -1)
      picked = logp.gather(1, ids[0, 1:, None])[:, 0]
      mask = torch.tensor(ex["loss_mask"][1:], dtype=torch.float32)
      total, count = total - float((picked * mask).sum()), count + float(mask.sum())
  return total / count


@pytest.fixture(scope="module")
def ci_build(tmp_path_factory):
  """The ci build, SIGKILLed in pretraining and run again: (out, env, summary, losses)."""
  tmp = tmp_path_factory.mktemp("ci_build")
  out, env = tmp / "starter", _env(tmp)
  cmd, first_losses = _killed_in_pretraining(out, env)
  done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return out, env, json.loads(done.stdout.strip().splitlines()[-1]), first_losses


def test_build_resumes_after_sigkill_and_loads_in_transformers(ci_build):
  out, _, summary, first_losses = ci_build
  resumed = summary["pretrain"]["resumed_at"]
  assert resumed >= 10 and resumed % 10 == 0  # the newest checkpoint, not step 0
  rows = _log(out)
  second = [r for r in rows if r["step"] > resumed][-(40 - resumed):]
  assert [r["step"] for r in second] == list(range(resumed + 1, 41))
  if resumed + 1 in first_losses:  # the same params and the same batch: the same loss
    np.testing.assert_allclose(second[0]["loss"], first_losses[resumed + 1], rtol=1e-6)
  # The repeat test runs at each saved step (and only there); the last is the final model's.
  assert [r["step"] for r in second if "probe" in r] == list(range(resumed + 10, 41, 10))
  assert second[-1]["probe"] == summary["pretrain"]["copying"]
  examples = [json.loads(x) for x in
              (out / "stages" / "sft_examples.jsonl").read_text().splitlines()][:6]
  # Fine-tuning taught its examples: their target loss fell from the pretrained model's.
  assert _target_loss(out, examples) < _target_loss(out / "stages" / "pretrain_model", examples)
  assert summary["sft"]["examples"]["designer"] > 0 and summary["sft"]["examples"]["agent"] > 0
  _assert_fingerprints_match_the_files(out, summary)

  tok = load_tokenizer(out)
  messages = [{"role": "user", "content": "Write a game about primes."}]
  ids = tok.encode(tok.apply_chat_template(messages))
  ours = np.asarray(from_pretrained(out, dtype="float32")(np.asarray([ids])))
  hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
  with torch.no_grad():
    theirs = hf(torch.tensor([ids])).logits.numpy()
  np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=TOL)
  hf_tok = transformers.AutoTokenizer.from_pretrained(out)
  assert hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
      tok.apply_chat_template(messages))


def _assert_fingerprints_match_the_files(out, summary):
  """Each stage's sha256 in build.json is that of the files it left (resumed stages too)."""
  def sha(*paths):
    digest = hashlib.sha256()
    for path in sorted(paths):
      digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()

  stages = out / "stages"
  windows = np.load(stages / "pretrain_tokens.npz")["windows"]
  assert summary["tokenizer"]["sha256"] == sha(*(stages / "tokenizer").glob("*"))
  assert summary["envs"]["sha256"] == sha(stages / "envs.jsonl", stages / "minigames.jsonl")
  assert summary["pretrain"]["data_sha256"] == hashlib.sha256(windows.tobytes()).hexdigest()
  assert summary["pretrain"]["model_sha256"] == sha(*(stages / "pretrain_model").glob("*"))
  assert summary["sft"]["data_sha256"] == sha(stages / "sft_examples.jsonl")
  assert summary["sft"]["model_sha256"] == sha(*(stages / "sft_model").glob("*"))
  exported = [p for p in out.iterdir() if p.is_file() and p.name != "build.json"]
  assert {p.name for p in exported} >= {"config.json", "tokenizer.json", "model.safetensors"}
  assert summary["export"]["sha256"] == sha(*exported)


def test_a_finished_stage_whose_files_changed_stops_the_build_with_one_line(ci_build,
                                                                            tmp_path):
  """A damaged fine-tuning set under a finished stage is refused, not trained on again."""
  out, env, _, _ = ci_build
  copy = tmp_path / "starter"
  shutil.copytree(out, copy)
  with (copy / "stages" / "sft_examples.jsonl").open("a") as f:
    f.write('{"tokens": [1, 2], "loss_mask": [0, 1], "role": "agent"}\n')
  done = subprocess.run([*BUILD, "--out", str(copy)], env=env, capture_output=True, text=True,
                        timeout=300)
  assert done.returncode == 2
  assert done.stderr.splitlines() == [
      f"error: {copy / 'stages' / 'sft.done.json'}: the files of stage sft changed since it "
      "finished (data_sha256 differ); delete the marker to redo the stage"]


def test_a_warm_start_learns_the_peek_family_and_rehearses_the_build(ci_build, tmp_path):
  """`warm --from` the ci build: eight peek games, their designer and arm-dependent agent
  rows (both arms of each game at each of the warm size's reset seeds) plus as many rows
  drawn from the build's own set. The exported model's loss on the new rows fell from the
  build's; on the rehearsed rows it stays under half of what a warm start without rehearsal
  (`--rehearsal 0`) leaves. A second run skips every stage."""
  out, env, _, _ = ci_build

  def warm(name, *extra):
    cmd = [sys.executable, "-m", "proj.starter", "warm", "--from", str(out), "--out",
           str(tmp_path / name), "--config", "starter_ci", "--quiet", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return cmd, json.loads(done.stdout.strip().splitlines()[-1])

  cmd, summary = warm("warm")
  assert summary["envs"]["count"] == {"minigames": 8} and summary["envs"]["family"] == "peek"
  rows = [json.loads(x) for x in
          (tmp_path / "warm" / "stages" / "sft_examples.jsonl").read_text().splitlines()]
  new = [r for r in rows if not r.get("rehearsal")]
  old = [r for r in rows if r.get("rehearsal")]
  assert {r["role"] for r in new} == {"designer", "agent"} and len(old) == len(new)
  # both arms of each game at each of the warm size's reset seeds, besides imperfect rows
  resets = WARM_SIZES["ci"]["minigame_resets"]
  assert resets > 1 and sum(r["role"] == "agent" for r in new) >= 8 * 2 * resets
  assert summary["sft"]["examples"]["rehearsal"] == len(old)
  _, alone = warm("alone", "--rehearsal", "0")
  assert alone["sft"]["examples"].get("rehearsal", 0) == 0  # no rehearsal rows, no count
  assert _target_loss(tmp_path / "warm", new[:6]) < _target_loss(out, new[:6])
  assert _target_loss(tmp_path / "warm", old[:6]) < 0.5 * _target_loss(tmp_path / "alone",
                                                                        old[:6])
  again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])[
      "sft"]["wall_s"] == summary["sft"]["wall_s"], again.stderr[-2000:]


@pytest.fixture(scope="module")
def ci_loop(ci_build, tmp_path_factory):
  """Two steps of configs/starter_ci.py from the ci starter: (workdir, curriculum lines,
  scalars)."""
  out, env, _, _ = ci_build
  workdir = tmp_path_factory.mktemp("ci_loop") / "run"
  cmd = [sys.executable, str(REPO / "launch" / "tpu_run.py"), "--config",
         config_path("starter_ci"),
         "--workdir", str(workdir), f"--config.model.checkpoint={out}",
         f"--config.tokenizer={out}"]
  done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
  steps = [json.loads(x) for x in (workdir / "curriculum.jsonl").read_text().splitlines()]
  return workdir, steps, _tb_scalars(workdir / "tb")


def test_two_loop_steps_from_the_ci_starter_play_its_minigame_memory(ci_loop):
  """The config end to end from the built starter: every step asks for designs, and a refresh
  short of valid ones is filled from the minigame memory, whose games the agent plays in both
  arms in the sandbox and trains on."""
  _, steps, scalars = ci_loop
  assert [s["step"] for s in steps] == [1, 2]
  for step in steps:
    assert step["envs"] and all(len(e["returns"]["no_hint"]) == 2 for e in step["envs"])
    assert all(uid.startswith("mg1/guess/") or uid.startswith("d") for uid in step["memory"])
  assert scalars["curriculum/designed_envs"] + scalars["curriculum/replayed_envs"]
  assert min(scalars["train/agent/num_rows"]) >= 1


def _regret(env):
  """Hint regret from an environment's recorded returns: mean with hint - mean without."""
  hint, no_hint = env["returns"]["hint"], env["returns"]["no_hint"]
  return sum(hint) / len(hint) - sum(no_hint) / len(no_hint)


def test_the_ci_starter_writes_valid_designs_that_train_the_designer(ci_loop):
  """Designs the starter writes pass the validator, are played in both arms, give the regret
  the step reports, come due one refresh later with non-zero advantages and enter the memory.
  Fails while the starter writes nothing valid."""
  _, steps, scalars = ci_loop
  designed = [e for e in steps[0]["envs"] if e["origin"] == "designed"]
  assert designed, "the ci starter wrote no valid design"
  for e in designed:  # real returns of both arms, G = 2 each, from the sandbox
    assert len(e["returns"]["hint"]) == len(e["returns"]["no_hint"]) == 2
  regrets = [_regret(e) for e in steps[0]["envs"]]
  assert scalars["curriculum/regret_mean"][0] == pytest.approx(sum(regrets) / len(regrets))
  assert max(scalars["curriculum/valid_rate"]) > 0
  # Step 2 trains the designs of step 1 (k = 1) and, being the last step, its own: the valid
  # ones' reward is their regret.
  valid = [e for step in steps for e in step["envs"] if e["origin"] == "designed"]
  assert scalars["designer/regret_valid_mean"][-1] == pytest.approx(
      sum(map(_regret, valid)) / len(valid))
  assert scalars["train/designer/num_rows"][-1] >= len(valid)
  assert scalars["train/designer/advantage_absmax"][-1] > 0
  assert {e["uid"] for e in designed} <= set(steps[-1]["memory"])  # model-written entries


# The ci starter: `--size ci` with the prompts (and skill) of proj/starter/configs/starter_ci.py.
BUILD = [sys.executable, "-m", "proj.starter", "build", "--size", "ci", "--config",
         "starter_ci", "--quiet"]


def _tb_scalars(logdir):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  from tensorboard.util import tensor_util

  acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
  acc.Reload()
  values = {tag: [tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"]}
  return {tag: [float(v) for v in vs] for tag, vs in values.items()  # numbers, not text panels
          if vs and vs[0].dtype.kind in "fiu"}
