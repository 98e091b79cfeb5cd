"""End to end: `python launch/tpu_run.py --config smoke.py` for two steps, then a resume.

Real pieces throughout (tiny model, engine, sandbox pool, GRPO trainer, orbax checkpoints),
run as `make smoke` runs them: a child process on one CPU device (the 8 fake devices of the
test session are not inherited). Checks that every required TensorBoard tag is written, that
a checkpoint exists, and that a second launch continues at step 3 with the memory the first
one saved. Those two launches write to a gs:// workdir on the GCS emulator (the `gcs` fixture):
checkpoints, TensorBoard events, logs and the curriculum land in the bucket, nothing local is
made, and `python -m spade_jax.export` and `python -m spade_jax.eval run --checkpoint gs://...`
read from there. All launches share a persistent compilation cache in the bucket, so the
later ones mostly reuse the first one's executables. A third launch plays one step of the
tool-use setting (the tool seeds, the real reply parser) in a local workdir, where a real
SIGTERM stops it: it saves that step and says how to go on. A last launch,
every kept checkpoint damaged, stops in one line; falling back past one damaged step is
tests/launch/test_multiprocess_e2e.py's, on the same emulator.
"""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from gymnasium.utils.env_checker import check_env
from tensorboard.util import tensor_util

from spade_jax import config_schema, export, storage
from spade_jax.envs.gym import from_curriculum_line
from spade_jax.eval import __main__ as eval_cli
from spade_jax.eval.load import tokenizer_for
from spade_jax.preemption import EXIT_PREEMPTED
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.tokenizer import load_tokenizer
from tests.launch.launch_procs import run_report, running, tree_below
from tests.launch.tb_events import tensor_events
from tests.xla_flags import child_env

TPU_RUN = os.fspath(config_schema.REPO_ROOT / "launch" / "tpu_run.py")
REQUIRED_TAGS = (
    "curriculum/valid_rate", "curriculum/designed_envs", "curriculum/replayed_envs",
    "curriculum/learnable_share", "curriculum/learnable_share_step", "curriculum/regret_mean",
    "curriculum/diversity_vendi", "curriculum/diversity_vendi_per_n",
    "curriculum/envs_without_regret", "train/agent/clip_fraction",
    "curriculum/reward_levels", "curriculum/formula_reveal_rate", "agent/return_no_hint",
    "agent/return_hint", "train/loss", "train/kl", "train/logprob_gap_mean", "time/generate_s",
    "time/sandbox_s", "time/train_s")


def _scalars(events):
  return {tag: [e.step for e in tensors] for tag, tensors in events.items()}


def _values(events, tag):
  return [float(tensor_util.make_ndarray(e.tensor_proto)) for e in events[tag]]


def _latest_host_state(workdir):
  steps = sorted(int(p) for p in storage.listdir(f"{workdir}/checkpoints") if p.isdigit())
  assert steps, f"no checkpoint under {workdir}/checkpoints"
  meta_dir = f"{workdir}/checkpoints/{steps[-1]}/meta"
  name = next(p for p in storage.listdir(meta_dir)
              if not p.endswith(".orbax-checkpoint") and "commit_success" not in p)
  return steps[-1], json.loads(storage.read_text(f"{meta_dir}/{name}"))["host_state"]


def _memory(host_state):
  return {e["uid"]: e for e in host_state["memory"]["entries"]}


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory, gcs):
  workdir = f"{gcs}/smoke"
  cwd = tmp_path_factory.mktemp("cwd")  # where the launches run: a ./gs:/... would show here
  corpus = tmp_path_factory.mktemp("corpus") / "passages.txt"
  corpus.write_text("Ohm's law: V = I R.\n\nA lever balances when m1 d1 = m2 d2.\n")
  # The smoke config, shrunk further so that three steps fit the test budget; k=4 keeps step 3
  # inside the first window (no second generation, no designer rows: `make smoke` and the
  # self-play tests cover those). The last step of a launch still closes the window's pending
  # designs; "discard" gives the random model's invalid ones no rows, because smoke.py's
  # "two_level" rows (~3k-token designer prompts) would add a compile of a 4096-long train
  # step to this test.
  overrides = [f"--config.corpus.paths=('{corpus}',)", "--config.selfplay.num_envs=2",
               "--config.selfplay.k=4", "--config.selfplay.designer_advantage=discard",
               "--config.selfplay.max_turns=2", "--config.selfplay.memory.sample_size=0",
               "--config.sampling.designer.max_new_tokens=16",
               "--config.sampling.agent.max_new_tokens=8",
               f"--config.train.compilation_cache_dir={gcs}/jax_cache"]
  env = child_env(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")

  def launch(num_steps, where=workdir, extra=(), returncode=0):
    proc = subprocess.run([sys.executable, TPU_RUN, "--config", "smoke.py", "--workdir",
                           where, f"--config.train.num_steps={num_steps}", *overrides, *extra],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == returncode, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc

  tools = os.fspath(tmp_path_factory.mktemp("smoke_tool_use"))
  tool_args = [sys.executable, TPU_RUN, "--config", "smoke.py", "--workdir", tools,
               "--config.train.num_steps=2", *overrides, "--config.setting=tool_use",
               "--config.selfplay.library=seeds",
               "--config.selfplay.skills=('lookup','transaction')"]
  # A real SIGTERM while step 1 runs (its first compile): the run stops after step 1 and
  # saves it although checkpoint_every says not yet. (A relaunch from a checkpoint is the
  # games launches' below; after a SIGTERM, the two-process test's in `make test-slow`.)
  preempted = sigterm_during_step_1(tool_args + ["--config.train.checkpoint_every=100"], env)
  tool_use = {"scalars": _scalars(tensor_events(tools)), "preempted": preempted,
              "log": open(os.path.join(tools, "log.txt"), encoding="utf-8").read()}
  launch(2)
  tags = ("time/sandbox_s", "train/loss", "train/kl", "train/grad_norm", "agent/return_no_hint")
  events = tensor_events(workdir)
  first = {"scalars": _scalars(events), "checkpoint": _latest_host_state(workdir),
           "values": {t: _values(events, t) for t in tags},
           "log": storage.read_text(f"{workdir}/log.txt"), "local": os.listdir(cwd),
           "bucket": storage.listdir(workdir), "cache": storage.listdir(f"{gcs}/jax_cache")}
  resumed = launch(3)
  second = {"scalars": _scalars(tensor_events(workdir)), "checkpoint": _latest_host_state(workdir),
            "log": storage.read_text(f"{workdir}/log.txt"), "workdir": workdir,
            "stdout": resumed.stdout}
  return first, second, tool_use, workdir, launch


def test_every_tag_written_each_step(smoke_runs):
  first = smoke_runs[0]
  missing = [t for t in REQUIRED_TAGS if t not in first["scalars"]]
  assert not missing, f"tags never written: {missing}"
  for tag in REQUIRED_TAGS:
    # The paper's learnable share is per 16-step window: written when one closes or at the end.
    assert first["scalars"][tag] == ([2] if tag == "curriculum/learnable_share" else [1, 2]), tag
  assert "envs/0" in first["scalars"] and "rollouts/no_hint" in first["scalars"]
  assert "train/designer/loss_tokens" not in first["scalars"]  # discard: invalid, no rows


def test_every_stage_runs_for_real(smoke_runs):
  """The smoke config steps environments in the sandbox and trains on non-zero advantages."""
  values = smoke_runs[0]["values"]
  assert all(v > 0 for v in values["time/sandbox_s"]), values
  assert all(v > 0 for v in values["agent/return_no_hint"]), values  # the vowel share
  assert all(v > 0 for v in values["train/grad_norm"]), values  # non-zero advantages
  kl_step1, kl_step2 = values["train/kl"]
  assert kl_step1 == pytest.approx(0, abs=1e-6) and kl_step2 > 0, values  # ref == policy at 1
  assert values["train/loss"][1] != 0, values


def test_checkpoint_and_log(smoke_runs):
  first = smoke_runs[0]
  step, host_state = first["checkpoint"]
  assert step == 2 and host_state["steps_done"] == 2 and host_state["updates"] == 2
  # Step 2 was the launch's last: the window's designs (due at 5) were closed, not left over.
  assert host_state["curriculum"]["pending"] == []
  assert first["local"] == []  # everything went to the bucket, the compilation cache too
  assert first["bucket"] == ["checkpoints", "config.json", "curriculum.jsonl", "log.txt", "tb"]
  assert first["cache"]
  lines = first["log"].splitlines()
  assert [line.split(" | ")[0] for line in lines] == ["step 1/2", "step 2/2"]
  assert "designed" in lines[0] and "replayed" in lines[0]
  workdir = smoke_runs[3]
  saved = json.loads(storage.read_text(f"{workdir}/config.json"))
  assert saved["tokenizer"] == "tiny" and saved["train"]["num_steps"] == 3  # the last launch's
  assert tokenizer_for(workdir, None).encode("a step") == load_tokenizer("tiny").encode("a step")


def test_resume_continues_at_step_3_with_the_same_memory(smoke_runs):
  first, second = smoke_runs[:2]
  # The launch's own account first (a step without samples says why), then what it wrote.
  assert second["log"].splitlines()[-1].startswith("step 3/3"), second["stdout"][-3000:]
  assert second["scalars"]["train/loss"] == [1, 2, 3], second["stdout"][-3000:]  # 3 added
  saved, resumed = _memory(first["checkpoint"][1]), _memory(second["checkpoint"][1])
  assert set(saved) <= set(resumed)
  for uid, entry in saved.items():  # a fresh memory would have restarted these counts
    assert resumed[uid]["times_played"] >= entry["times_played"], uid


def test_tool_use_setting_runs_a_step_on_the_tiny_model(smoke_runs):
  tool_use = smoke_runs[2]
  for tag in REQUIRED_TAGS:  # the learnable share when its window closes or the run ends:
    # the preempted run's window stays open for the relaunch
    assert tool_use["scalars"].get(tag) == (None if tag == "curriculum/learnable_share"
                                            else [1]), tag
  assert [line.split(" | ")[0] for line in tool_use["log"].splitlines()] == ["step 1/2"]


def test_sigterm_saves_the_finished_step_and_says_how_to_go_on(smoke_runs):
  tool_use = smoke_runs[2]
  proc, workers = tool_use["preempted"]
  assert proc.returncode == EXIT_PREEMPTED, proc.stdout[-3000:] + proc.stderr[-3000:]
  workdir = proc.args[proc.args.index("--workdir") + 1]
  lines = [x for x in proc.stdout.splitlines() if x.startswith("preempted")]
  assert lines == [f"preempted by SIGTERM: stopped after step 1, saved {workdir}/checkpoints/1;"
                   " the same command resumes at step 2"], proc.stdout[-2000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  assert workers and not [pid for pid in workers if running(pid)], workers  # none left
  step, host_state = _latest_host_state(workdir)
  assert step == 1 and host_state["steps_done"] == 1, host_state


def sigterm_during_step_1(args, env):
  """Runs `args` and sends SIGTERM once step 1 has begun; (the finished process, the pids
  of its sandbox workers)."""
  proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  stderr = []
  reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
  reader.start()
  stdout, workers = [], []
  for line in proc.stdout:
    stdout.append(line)
    if line.startswith("self-play: starting at step 1"):
      workers = tree_below(proc.pid)
      proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=900)
  reader.join()
  return subprocess.CompletedProcess(args, proc.returncode, "".join(stdout), stderr[0]), workers


def test_the_smoke_curriculum_exports_and_plays_through_gymnasium(smoke_runs, capsys):
  second = smoke_runs[1]
  out = f"{second['workdir']}/export/curriculum.jsonl"  # read from and written to the bucket
  export.main(["--workdir", second["workdir"], "--out", out])
  lines = [json.loads(x) for x in storage.read_text(out).splitlines()]
  assert capsys.readouterr().out == f"{out}: {len(lines)} environments\n" and lines
  memory = set(_memory(second["checkpoint"][1]))
  for line in lines:
    assert [s["step"] for s in line["steps"]] == [1, 2, 3]  # one window, resumed at step 3
    assert line["in_memory"] == (line["uid"] in memory)
  with SandboxPool(num_workers=1, max_turns=2) as pool:
    for line in lines[:3]:
      env = from_curriculum_line(line, pool=pool)
      check_env(env, skip_render_check=True)
      obs, _ = env.reset(seed=0)
      done = False
      while not done:  # a scripted policy: always answer "a"
        obs, reward, terminated, truncated, _ = env.step("a")
        assert 0.0 <= reward <= 1.0
        done = terminated or truncated


def test_eval_run_reads_the_checkpoint_from_the_bucket(smoke_runs):
  workdir = smoke_runs[1]["workdir"]
  out = f"{workdir}/eval/cli.jsonl"
  eval_cli.main(["run", "--checkpoint", workdir, "--tokenizer", "tiny", "--suite",
                 "reasoning_gym", "--limit", "1", "--samples", "1", "--max-new-tokens", "4",
                 "--num-slots", "2", "--max-cache-len", "512", "--prefill-buckets", "256",
                 "--out", out, "--quiet"])
  assert [json.loads(x)["suite"] for x in storage.read_text(out).splitlines()] == [
      "reasoning_gym"]
  summary = json.loads(storage.read_text(f"{workdir}/eval/cli.summary.json"))
  assert summary["checkpoint"] == workdir and summary["suites"]["reasoning_gym"]["n"] == 1


def _flip_params(step_dir, start=100, count=64):
  """Flips `count` bytes inside the largest OCDBT data file of the step's parameters."""
  path = max((p for p in storage.files(f"{step_dir}/params") if p.parent.name == "d"),
             key=storage.size)
  data = bytearray(path.read_bytes())
  data[start:start + count] = bytes(b ^ 0xFF for b in data[start:start + count])
  path.write_bytes(bytes(data))
  return os.fspath(path)


def test_a_launch_whose_kept_checkpoints_are_all_damaged_stops_in_one_line(smoke_runs):
  """Runs after the resume (checkpoints 2 and 3 kept): both damaged, the relaunch names each
  step's fault and stops, exit code 1. (Falling back past one damaged step is the two-process
  test's, on the same bucket.)"""
  *_, workdir, launch = smoke_runs
  flipped = _flip_params(f"{workdir}/checkpoints/2")
  unreadable = _flip_params(f"{workdir}/checkpoints/3", 0, 4096)  # tensorstore fails on it
  proc = launch(3, returncode=1)
  report = run_report(proc.stderr)
  assert len(report) == 1, proc.stderr[-5000:]  # one line, no traceback
  assert report[0].startswith(f"error: no intact checkpoint in {workdir}/checkpoints"), report
  assert "step 3:" in report[0] and f"cannot be read, data in {unreadable}" in report[0], report
  assert "step 2:" in report[0] and "checksum mismatch" in report[0], report
  assert os.path.basename(flipped) in report[0], report
  assert not storage.isdir(f"{workdir}/checkpoints/3.corrupt")  # nothing moved


def test_a_tokenizer_that_cannot_be_loaded_stops_the_launch_in_one_line(smoke_runs, tmp_path):
  *_, launch = smoke_runs
  proc = launch(1, os.fspath(tmp_path / "run"), [f"--config.tokenizer={tmp_path}"],
                returncode=1)
  assert proc.stderr.splitlines() == [
      f"error: config.tokenizer='{tmp_path}': {tmp_path}/tokenizer.json: missing (a Hugging "
      "Face tokenizer directory needs tokenizer.json)"], proc.stderr[-3000:]
