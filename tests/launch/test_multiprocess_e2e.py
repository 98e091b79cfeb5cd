"""Two processes, one run: `launch/tpu_run.py` under jax.distributed on the loopback.

Each process gets 4 fake CPU devices (`--xla_force_host_platform_device_count=4`) and the
standard JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID variables, which
`--distributed=auto` honours; the smoke config then runs on one 8-device mesh with fsdp=8
over both processes (the command of docs/launch.md, "Several processes on one machine").
Three launches of the pair, the fewest that cover it: an uninterrupted 2-step run; a second
2-step run whose newest checkpoint then gets flipped bytes in a parameter data file; and a
relaunch of that one, in which both processes must refuse step 2, fall back to step 1 and
end step 2 in the uninterrupted run's state bit for bit. The uninterrupted run writes to a
local workdir, the other two to a gs:// workdir on the GCS emulator (the `gcs` fixture): both
processes write their checkpoint shards to the bucket, process 0 quarantines the damaged step
there and the relaunch resumes from it. The launches of each process share a persistent
compilation cache.
"""

import ast
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from spade_jax import config_schema, storage

TPU_RUN = os.fspath(config_schema.REPO_ROOT / "launch" / "tpu_run.py")
NUM_PROCESSES = 2
TIMEOUT_S = 1800  # per launch of the pair; two shared cores compile both programs
pytestmark = pytest.mark.timeout(3 * TIMEOUT_S)  # the first test sets up all three launches


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch_pair(workdir, num_steps, root):
  """Both processes of one launch; returns [(pid, stdout, stderr)] in process order."""
  corpus = root / "passages.txt"
  corpus.write_text("Ohm's law: V = I R.\n\nA lever balances when m1 d1 = m2 d2.\n")
  port = _free_port()
  procs = []
  for i in range(NUM_PROCESSES):
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               XLA_FLAGS="--xla_force_host_platform_device_count=4",
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
  outs = []
  try:
    for p in procs:
      out, err = p.communicate(timeout=TIMEOUT_S)
      outs.append((p.pid, out, err))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for i, (p, (_, out, err)) in enumerate(zip(procs, outs, strict=True)):
    assert p.returncode == 0, f"process {i}:\n{out[-3000:]}\n{err[-6000:]}"
  return outs


def _progress(stdout):
  """The per-step progress lines without their timings (identical on every process)."""
  return [re.sub(r" \| gen .*", "", line) for line in stdout.splitlines()
          if line.startswith("step ")]


def _meta(workdir, step):
  meta_dir = f"{workdir}/checkpoints/{step}/meta"
  name = next(p for p in storage.listdir(meta_dir)
              if not p.endswith(".orbax-checkpoint") and "commit_success" not in p)
  return json.loads(storage.read_text(f"{meta_dir}/{name}"))


def _scalars(workdir):
  acc = EventAccumulator(os.path.join(workdir, "tb"), size_guidance={"tensors": 0})
  acc.Reload()
  return {tag: [(e.step, e.tensor_proto.SerializeToString()) for e in acc.Tensors(tag)]
          for tag in acc.Tags()["tensors"] if not tag.startswith("time/")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, gcs):
  root = tmp_path_factory.mktemp("multiprocess")
  straight = _launch_pair(root / "straight", 2, root)
  bucket = f"{gcs}/multiprocess/resumed"
  first = _launch_pair(bucket, 2, root)
  data = [p for p in storage.files(f"{bucket}/checkpoints/2/params") if p.parent.name == "d"]
  path = max(data, key=storage.size)  # one byte range of one data file
  flipped = bytearray(path.read_bytes())
  flipped[100:164] = bytes(b ^ 0xFF for b in flipped[100:164])
  path.write_bytes(bytes(flipped))
  resumed = _launch_pair(bucket, 2, root)
  return root, straight, first, resumed, bucket


def test_every_process_sees_the_8_device_mesh_and_logs_the_same_metrics(runs):
  _, straight, *_ = runs
  for i, (_, out, _) in enumerate(straight):
    assert f"process {i}/2: mesh {{'data': 1, 'fsdp': 8, 'tensor': 1, 'expert': 1}}" in out
  lines = [_progress(out) for _, out, _ in straight]
  assert [line.split(" | ")[0] for line in lines[0]] == ["step 1/2", "step 2/2"]
  assert lines[0] == lines[1]


def test_only_process_0_writes_tensorboard_and_the_log(runs):
  root, straight, *_ = runs
  events = os.listdir(root / "straight" / "tb")
  assert len(events) == 1 and events[0].endswith(f".{straight[0][0]}.0"), events
  log = (root / "straight" / "log.txt").read_text().splitlines()
  assert [line.split(" | ")[0] for line in log] == ["step 1/2", "step 2/2"]


def test_both_processes_write_their_shards_of_the_checkpoint_to_the_bucket(runs):
  bucket = runs[-1]
  for item in ("params", "opt_state"):
    shards = [p for p in storage.listdir(f"{bucket}/checkpoints/2/{item}")
              if p.startswith("ocdbt.process_")]
    assert shards == ["ocdbt.process_0", "ocdbt.process_1"], (item, shards)


def test_both_processes_fall_back_past_the_damaged_step_and_match_bit_for_bit(runs):
  root, straight, _, resumed, bucket = runs
  for _, out, err in resumed:
    assert f"checkpoint {bucket}/checkpoints/2 is not usable" in err
    assert "checksum mismatch" in err and "starting at step 2 of 2" in out
  assert storage.listdir(f"{bucket}/checkpoints") == ["1", "2", "2.corrupt", "model_config.json"]
  assert not [p for p in os.listdir(root) if p.startswith("gs")]  # no ./gs:/... either
  straight_meta, resumed_meta = _meta(root / "straight", 2), _meta(bucket, 2)
  # The checksums fingerprint every bit of params and optimiser state (model/integrity.py).
  assert resumed_meta["checksums"] == straight_meta["checksums"]
  assert resumed_meta["rng"] == straight_meta["rng"]
  assert resumed_meta["host_state"] == straight_meta["host_state"]
  for (_, out, _), (_, expected, _) in zip(resumed, straight, strict=True):
    assert _progress(out) == _progress(expected)[1:]  # step 2's line, the same numbers
  straight_tb, resumed_tb = _scalars(root / "straight"), _scalars(bucket)
  assert set(straight_tb) == set(resumed_tb)
  for tag, entries in straight_tb.items():  # the newest event of each tag is the relaunch's
    assert resumed_tb[tag][-1] == entries[-1], tag


def test_each_process_sandbox_runs_half_of_the_episodes(runs):
  _, straight, *_ = runs
  counts = []
  for i, (_, out, _) in enumerate(straight):
    line = next(x for x in out.splitlines() if x.startswith(f"process {i}/2: this process's"))
    counts.append(ast.literal_eval(line.split(" ran ", 1)[1]))
  episodes = 2 * 2 * 2 * 2  # steps x environments x arms x G
  assert [c["reset"] for c in counts] == [episodes // 2] * 2, counts
