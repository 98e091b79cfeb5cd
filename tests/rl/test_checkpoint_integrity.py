"""Checkpoints cannot silently corrupt a run: real orbax files, flipped bytes, a real SIGKILL.

Each test writes real OCDBT checkpoints of small array trees with the trainer's
CheckpointManager, damages them the way a disk or a crash would, and checks that restoring
names the checkpoint, the array and the file, and falls back to the newest intact step.
"""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.model.integrity import CheckpointIntegrityError, array_names, data_files
from spade_jax.rl.checkpoint import CheckpointManager, abstract_like
from tests.xla_flags import child_env


def _tree(step):
  key = jax.random.key(step)
  return {"embed": jax.random.normal(key, (64, 256)),  # 64 KiB: its chunk has its own file
          "layers": [{"scale": jnp.full((32,), 1.0 + step)}, {"scale": jnp.ones((32,))}]}


def _save(directory, steps, **kwargs):
  manager = CheckpointManager(directory, keep=5, **kwargs)
  for step in steps:
    params = _tree(step)
    manager.save(step, params, {"mu": jax.tree.map(jnp.zeros_like, params)},
                 np.zeros(2, np.uint32), {"seen": step}, force=True)
  manager.close()
  return manager


def _restore(directory, **kwargs):
  params = _tree(0)
  manager = CheckpointManager(directory, keep=5)
  try:
    return manager.restore_latest(abstract_like(params),
                                  abstract_like({"mu": params}), **kwargs)
  finally:
    manager.close()


def _embed_file(step_dir: pathlib.Path) -> pathlib.Path:
  """The largest data file of the step's params: the chunk of `embed` (found by size)."""
  files = [p for p in (step_dir / "params").rglob("*") if p.is_file() and "/d/" in str(p)]
  return max(files, key=lambda p: p.stat().st_size)


def _flip(path: pathlib.Path, start: int = 200, count: int = 64) -> None:
  data = bytearray(path.read_bytes())
  for i in range(start, min(start + count, len(data))):
    data[i] ^= 0xFF
  path.write_bytes(bytes(data))


def test_intact_checkpoint_restores_and_data_files_name_every_array(tmp_path):
  _save(tmp_path, [1])
  restored = _restore(tmp_path)
  assert restored.step == 1 and restored.host_state == {"seen": 1}
  np.testing.assert_array_equal(restored.params["embed"], _tree(1)["embed"])
  files = data_files(tmp_path / "1" / "params")
  names = array_names(_tree(1))
  assert sorted(files) == sorted(names) and names[0] == "embed"
  assert _embed_file(tmp_path / "1") in files["embed"]


def test_flipped_bytes_in_the_newest_params_fall_back_to_the_previous_step(tmp_path):
  _save(tmp_path, [1, 2])
  damaged = _embed_file(tmp_path / "2")
  _flip(damaged)
  with pytest.warns(RuntimeWarning) as caught:
    restored = _restore(tmp_path)
  message = str(caught[0].message)
  assert f"checkpoint {tmp_path / '2'} is not usable" in message
  assert "array embed" in message and str(damaged.relative_to(tmp_path)) in message
  assert restored.step == 1 and restored.host_state == {"seen": 1}
  np.testing.assert_array_equal(restored.params["embed"], _tree(1)["embed"])
  assert (tmp_path / "2.corrupt").is_dir() and not (tmp_path / "2").exists()


def test_a_chunk_tensorstore_cannot_decode_names_the_array_and_its_file(tmp_path):
  _save(tmp_path, [1, 2])
  damaged = _embed_file(tmp_path / "2")
  _flip(damaged, start=0, count=4096)  # the zstd frame header: the read itself fails
  with pytest.warns(RuntimeWarning) as caught:
    restored = _restore(tmp_path)
  message = str(caught[0].message)
  assert f"array params/embed cannot be read, data in {damaged} " in message, message
  assert "going on from step 1" in message and "TensorStore(" not in message
  assert len(message.splitlines()) == 1 and restored.step == 1


def test_a_single_corrupt_checkpoint_stops_naming_it_and_moves_nothing(tmp_path):
  _save(tmp_path, [1])
  _flip(_embed_file(tmp_path / "1"))
  with pytest.raises(CheckpointIntegrityError) as err:
    _restore(tmp_path)
  assert f"no intact checkpoint in {tmp_path}" in str(err.value)
  assert "array embed" in str(err.value) and "step 1:" in str(err.value)
  assert (tmp_path / "1").is_dir()  # left in place: a relaunch fails the same way


def test_missing_data_file_names_the_file_and_the_array(tmp_path):
  _save(tmp_path, [1])
  missing = _embed_file(tmp_path / "1")
  missing.unlink()
  with pytest.raises(CheckpointIntegrityError,
                                                   match="file missing") as err:
    _restore(tmp_path)
  assert str(missing) in str(err.value) and "array embed" in str(err.value)


def test_non_finite_parameters_are_refused(tmp_path):
  manager = CheckpointManager(tmp_path, keep=2)
  params = _tree(1)
  params["layers"][1]["scale"] = params["layers"][1]["scale"].at[3].set(jnp.nan)
  manager.save(1, params, {"mu": params}, None, {}, force=True)
  manager.close()
  with pytest.raises(CheckpointIntegrityError) as err:
    _restore(tmp_path)
  assert "array layers.1.scale: 1 non-finite values" in str(err.value)


def test_edited_host_state_is_refused(tmp_path):
  _save(tmp_path, [1, 2])
  meta = next(p for p in (tmp_path / "2" / "meta").iterdir() if p.suffix != ".orbax-checkpoint")
  meta.write_text(meta.read_text().replace('"seen": 2', '"seen": 7'))
  with pytest.warns(RuntimeWarning, match="host state does not match its digest"):
    assert _restore(tmp_path, quarantine=False).step == 1


_KILLED_SAVE = textwrap.dedent("""
    import pathlib, sys, time, jax, numpy as np
    from spade_jax.rl.checkpoint import CheckpointManager
    manager = CheckpointManager(sys.argv[1], keep=5)
    small = {"w": np.ones((8,), np.float32)}
    manager.save(1, small, {"mu": small}, None, {"seen": 1}, force=True)
    manager.wait_until_finished()
    big = {"w": jax.random.normal(jax.random.key(0), (48 * 1024 * 1024,))}  # 192 MiB
    manager.save(2, big, {"mu": big}, None, {"seen": 2}, force=True)
    deadline = time.time() + 60  # orbax creates the step's temporary directory in the background
    while not any(p.name.startswith("2") for p in pathlib.Path(sys.argv[1]).iterdir()):
      assert time.time() < deadline, "no directory for step 2 appeared"
      time.sleep(0.005)
    print("saving", flush=True)
    manager.wait_until_finished()
    print("saved", flush=True)
""")


def test_a_checkpoint_being_written_when_the_process_is_killed_is_never_taken(tmp_path):
  env = child_env()
  proc = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, os.fspath(tmp_path)],
                          stdout=subprocess.PIPE, text=True, env=env)
  try:
    assert proc.stdout.readline().strip() == "saving"
    proc.send_signal(signal.SIGKILL)
  finally:
    proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  left = [p.name for p in tmp_path.iterdir() if p.name.startswith("2")]
  assert left and "2" not in left, f"the save was not cut short: {left}"
  manager = CheckpointManager(tmp_path, keep=5)
  small = abstract_like({"w": jnp.zeros((8,))})
  restored = manager.restore_latest(small, {"mu": small})
  manager.close()
  assert restored.step == 1 and restored.host_state == {"seen": 1}
