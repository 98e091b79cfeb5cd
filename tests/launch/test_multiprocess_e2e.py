"""Two processes, one run: `launch/tpu_run.py` under jax.distributed on the loopback.

Each process gets 4 fake CPU devices (`--xla_force_host_platform_device_count=4`) and the
standard JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID variables, which
`--distributed=auto` honours; the smoke config then runs on one 8-device mesh with fsdp=8
over both processes (the command of docs/launch.md, "Several processes on one machine").
Three launches of the pair, the fewest that cover it: an uninterrupted 2-step run; a
relaunch of a copy of it whose newest checkpoint got flipped bytes in a parameter data file,
in which both processes must refuse step 2, fall back to step 1 and end step 2 in the
uninterrupted run's state bit for bit, and which a real SIGTERM to process 0 stops there
(the preemption sync point); and a relaunch of a copy of that for step 3, in which process 1
is killed (SIGKILL) mid-step and process 0 must stop within 120 s with one line naming it.
Every workdir is a gs:// URL on the GCS emulator (the `gcs` fixture): both processes write
their checkpoint shards to the bucket, process 0 quarantines the damaged step there and the
relaunches resume from it (the copies are made in the bucket, where orbax's commit markers
live). The launches of each process share a persistent compilation cache.
"""

import ast
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from spade_jax import config_schema, storage
from spade_jax.multihost import EXIT_PEER_LOST
from spade_jax.preemption import EXIT_PREEMPTED
from tests.launch.launch_procs import run_report, running, tree_below
from tests.launch.tb_events import tensor_events
from tests.xla_flags import child_env

TPU_RUN = os.fspath(config_schema.REPO_ROOT / "launch" / "tpu_run.py")
NUM_PROCESSES = 2
TIMEOUT_S = 1800  # per launch of the pair; two shared cores compile both programs
# The first test sets up all three launches; a recorded run (`make test-slow`).
pytestmark = [pytest.mark.timeout(3 * TIMEOUT_S), pytest.mark.slow]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch_pair(workdir, num_steps, root, on_line=None, returncodes=(0, 0)):
  """Both processes of one launch; returns [(pid, stdout, stderr, exit time)] in process
  order. `on_line(i, line, procs)` sees each stdout line of process i as it comes."""
  corpus = root / "passages.txt"
  corpus.write_text("Ohm's law: V = I R.\n\nA lever balances when m1 d1 = m2 d2.\n")
  port = _free_port()
  procs = []
  for i in range(NUM_PROCESSES):
    env = child_env(devices=4, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                    JAX_NUM_PROCESSES=str(NUM_PROCESSES), JAX_PROCESS_ID=str(i))
    procs.append(subprocess.Popen(
        [sys.executable, TPU_RUN, "--config", "smoke.py", "--workdir", os.fspath(workdir),
         f"--config.train.num_steps={num_steps}", "--config.mesh.fsdp=-1",
         "--config.rl.micro_batch_size=8",  # a multiple of the 8 devices on data x fsdp
         # The same shrinking as tests/launch/test_smoke_e2e.py.
         f"--config.corpus.paths=('{corpus}',)", "--config.selfplay.num_envs=2",
         "--config.selfplay.k=4", "--config.selfplay.designer_advantage=discard",
         "--config.selfplay.max_turns=2",
         "--config.selfplay.memory.sample_size=0",
         "--config.sampling.designer.max_new_tokens=16",
         "--config.sampling.agent.max_new_tokens=8",
         f"--config.train.compilation_cache_dir={root / f'jax_cache_{i}'}"],
        env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  texts = [([], []) for _ in procs]
  ended = [None] * len(procs)

  def pump(i, which):
    for line in (procs[i].stdout, procs[i].stderr)[which]:
      texts[i][which].append(line)
      if which == 0 and on_line is not None:
        on_line(i, line, procs)

  def wait(i):
    procs[i].wait()
    ended[i] = time.monotonic()

  threads = [threading.Thread(target=f, args=a, daemon=True) for i in range(len(procs))
             for f, a in ((pump, (i, 0)), (pump, (i, 1)), (wait, (i,)))]
  for t in threads:
    t.start()
  try:
    for t in threads:
      t.join(timeout=TIMEOUT_S)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  outs = [(p.pid, "".join(out), "".join(err), end)
          for p, (out, err), end in zip(procs, texts, ended, strict=True)]
  for i, (p, (_, out, err, _)) in enumerate(zip(procs, outs, strict=True)):
    if returncodes[i] is not None:
      assert p.returncode == returncodes[i], f"process {i}:\n{out[-3000:]}\n{err[-6000:]}"
  return outs


def _progress(stdout):
  """The per-step progress lines without their timings and the run's length (identical on
  every process)."""
  return [re.sub(r"^(step \d+)/\d+", r"\1", re.sub(r" \| gen .*", "", line))
          for line in stdout.splitlines() if line.startswith("step ")]


def _meta(workdir, step):
  meta_dir = f"{workdir}/checkpoints/{step}/meta"
  name = next(p for p in storage.listdir(meta_dir)
              if not p.endswith(".orbax-checkpoint") and "commit_success" not in p)
  return json.loads(storage.read_text(f"{meta_dir}/{name}"))


def _copy(src, dst):
  """Every file of the workdir `src` at the same place under `dst` (in the bucket)."""
  for f in storage.files(src):
    storage.path(f"{dst}{os.fspath(f)[len(src):]}").write_bytes(f.read_bytes())


def _scalars(workdir):
  return {tag: [(e.step, e.tensor_proto.SerializeToString()) for e in events]
          for tag, events in tensor_events(workdir).items() if not tag.startswith("time/")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, gcs):
  root = tmp_path_factory.mktemp("multiprocess")
  bucket = f"{gcs}/multiprocess"
  straight = _launch_pair(f"{bucket}/straight", 2, root)
  _copy(f"{bucket}/straight", f"{bucket}/resumed")  # what a second 2-step run would write
  data = [p for p in storage.files(f"{bucket}/resumed/checkpoints/2/params")
          if p.parent.name == "d"]
  path = max(data, key=storage.size)  # one byte range of one data file
  flipped = bytearray(path.read_bytes())
  flipped[100:164] = bytes(b ^ 0xFF for b in flipped[100:164])
  path.write_bytes(bytes(flipped))
  # The relaunch falls back to step 1 and plays step 2 (of 3). A real SIGTERM to process 0
  # once that step is under way stops both processes after it (jax's preemption sync
  # point), step 2 saved.
  resumed = _launch_pair(f"{bucket}/resumed", 3, root, on_line=_signal_when(
      0, "self-play: starting at step 2", signal.SIGTERM), returncodes=(EXIT_PREEMPTED,) * 2)
  # A copy of it relaunched for step 3: `kill -9` of process 1 in the middle of that step.
  _copy(f"{bucket}/resumed", f"{bucket}/lost")
  killed = {}
  lost = _launch_pair(f"{bucket}/lost", 3, root, on_line=_signal_when(
      1, "self-play: starting at step 3", signal.SIGKILL, killed), returncodes=(EXIT_PEER_LOST, -9))
  return root, straight, resumed, (lost, killed), bucket


def _signal_when(rank, prefix, signum, seen=None):
  """An `on_line` that sends `signum` to process `rank` once its stdout shows `prefix`
  (after half a second: inside the step), noting the time and every process's workers."""
  def on_line(i, line, procs):
    if i == rank and line.startswith(prefix):
      time.sleep(0.5)
      if seen is not None:
        seen["workers"] = [w for p in procs for w in tree_below(p.pid)]
        seen["at"] = time.monotonic()
      procs[rank].send_signal(signum)
  return on_line


def test_every_process_sees_the_8_device_mesh_and_logs_the_same_metrics(runs):
  _, straight, *_ = runs
  for i, (_, out, *_) in enumerate(straight):
    assert f"process {i}/2: mesh {{'data': 1, 'fsdp': 8, 'tensor': 1, 'expert': 1}}" in out
  lines = [_progress(out) for _, out, *_ in straight]
  assert [line.split(" | ")[0] for line in lines[0]] == ["step 1", "step 2"]
  assert lines[0] == lines[1]


def test_only_process_0_writes_tensorboard_and_the_log(runs):
  _, straight, *_, bucket = runs
  events = storage.listdir(f"{bucket}/straight/tb")
  assert len(events) == 1 and events[0].endswith(f".{straight[0][0]}.0"), events
  log = storage.read_text(f"{bucket}/straight/log.txt").splitlines()
  assert [line.split(" | ")[0] for line in log] == ["step 1/2", "step 2/2"]


def test_both_processes_write_their_shards_of_the_checkpoint_to_the_bucket(runs):
  bucket = runs[-1]
  for item in ("params", "opt_state"):
    shards = [p for p in storage.listdir(f"{bucket}/straight/checkpoints/2/{item}")
              if p.startswith("ocdbt.process_")]
    assert shards == ["ocdbt.process_0", "ocdbt.process_1"], (item, shards)


def test_both_processes_fall_back_past_the_damaged_step_and_match_bit_for_bit(runs):
  root, straight, resumed, _, bucket = runs
  quarantined = f"{bucket}/resumed/checkpoints/2.corrupt"
  assert storage.isdir(quarantined)
  damaged = max((p for p in storage.files(f"{quarantined}/params") if p.parent.name == "d"),
                key=storage.size)  # the data file the fixture flipped bytes in
  for _, out, err, _ in resumed:
    assert f"checkpoint {bucket}/resumed/checkpoints/2 is not usable" in err
    assert "checksum mismatch" in err and damaged.name in err
    assert "starting at step 2 of 3" in out
    # A handled fault reads as handled: the warning and its source line (and, on a bucket, at
    # times orbax's note that the quarantined step has no metadata), besides the SIGTERM's.
    report = [x for x in run_report(err) if "preemption" not in x]
    assert len(report) <= 3 and "RuntimeWarning: checkpoint" in report[0], err[-5000:]
  assert not [p for p in os.listdir(root) if p.startswith("gs")]  # no ./gs:/... either
  straight_meta, resumed_meta = _meta(f"{bucket}/straight", 2), _meta(f"{bucket}/resumed", 2)
  # The checksums fingerprint every bit of params and optimiser state (model/integrity.py).
  assert resumed_meta["checksums"] == straight_meta["checksums"]
  assert resumed_meta["rng"] == straight_meta["rng"]
  # Step 2 was the uninterrupted run's last, so it also closed the window's pending designs
  # (trained nothing: discard gives invalid designs no rows); the relaunch's step 2 (of 3) did
  # not. Everything else of the host state is the same.
  resumed_state, straight_state = resumed_meta["host_state"], straight_meta["host_state"]
  assert straight_state["curriculum"].pop("pending") == []
  assert {d["due_step"] for d in resumed_state["curriculum"].pop("pending")} == {5}
  assert resumed_state == straight_state
  for (_, out, *_), (_, expected, *_) in zip(resumed, straight, strict=True):
    assert _progress(out) == _progress(expected)[1:]  # step 2's line, the same numbers
  straight_tb, resumed_tb = _scalars(f"{bucket}/straight"), _scalars(f"{bucket}/resumed")
  assert straight_tb and set(straight_tb) == set(resumed_tb)
  for tag, entries in straight_tb.items():  # the newest event of each tag is the relaunch's
    assert resumed_tb[tag][-1] == entries[-1], tag


def test_each_process_sandbox_runs_half_of_the_episodes(runs):
  _, straight, *_ = runs
  counts = []
  for i, (_, out, *_) in enumerate(straight):
    line = next(x for x in out.splitlines() if x.startswith(f"process {i}/2: this process's"))
    counts.append(ast.literal_eval(line.split(" ran ", 1)[1]))
  episodes = 2 * 2 * 2 * 2  # steps x environments x arms x G
  assert [c["reset"] for c in counts] == [episodes // 2] * 2, counts


def test_sigterm_to_one_process_stops_both_after_the_same_step_saved(runs):
  _, _, resumed, _, bucket = runs
  for i, (_, out, err, _) in enumerate(resumed):
    lines = [x for x in out.splitlines() if x.startswith("preempted")]
    assert lines == [f"preempted by SIGTERM or a preemption notice: stopped after step 2, "
                     f"saved {bucket}/resumed/checkpoints/2; the same command resumes at step 3"
                     ], (i, out[-2000:])
    assert "Traceback" not in err, err[-3000:]
  # What it saved is the uninterrupted run's step 2 (the fallback test compares every bit).
  assert _meta(f"{bucket}/resumed", 2)["host_state"]["steps_done"] == 2


def test_a_killed_process_stops_the_other_within_120_s_naming_it(runs):
  lost, killed = runs[3]
  (_, out, err, ended), (pid1, *_) = lost
  assert killed, "process 1 never started step 3"
  errors = [x for x in err.splitlines() if x.startswith("error:")]
  assert errors == [x for x in errors if f"lost process 1 (pid {pid1}" in x] and errors, (
      out[-2000:] + err[-4000:])
  assert "Traceback" not in err, err[-4000:]
  assert ended - killed["at"] < 120, ended - killed["at"]
  assert killed["workers"] and not [w for w in killed["workers"] if running(w)]
