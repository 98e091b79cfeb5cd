r"""Launches (or resumes) a SPADE self-play run.

    python launch/tpu_run.py --config games.py [--config.selfplay.k=8 ...] [--workdir DIR]

`--config` takes a module in configs/ by name or any path (`:arg` is passed to get_config);
every field can be overridden as `--config.a.b=value` and the config is locked, so a typo
fails. The run resumes from the newest checkpoint in the workdir (default runs/<config name>).
On several hosts (Cloud TPU pod slices) jax.distributed is initialised first; each host runs
this same command. Needs the package installed (`pip install -e .`, done by the Makefile).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from absl import flags
from ml_collections import ConfigDict

from spade_jax import config_schema, storage

# A process that sends no heartbeat for this long is declared dead by the coordination
# service (jax's default is 100 s); the others then stop (spade_jax/multihost.py).
HEARTBEAT_TIMEOUT_S = 60


def parse_args(argv: Sequence[str]) -> tuple[ConfigDict, str, str]:
  """argv (program name first) -> (locked config, workdir, distributed mode)."""
  fv = flags.FlagValues()
  workdir = flags.DEFINE_string("workdir", None, "output folder; default runs/<config name>",
                                flag_values=fv)
  distributed = flags.DEFINE_enum("distributed", "auto", ["auto", "on", "off"],
                                  "jax.distributed.initialize(): auto = on several TPU hosts",
                                  flag_values=fv)
  config, path = config_schema.parse_config_args(argv, fv, prog="python launch/tpu_run.py")
  name = config_schema.config_name(path)
  return config, workdir.value or os.fspath(storage.join("runs", name)), distributed.value


def _several_hosts() -> bool:
  hosts = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
  return len(hosts) > 1 or "JAX_COORDINATOR_ADDRESS" in os.environ


def distributed_args(env: Mapping[str, str]) -> dict[str, int]:
  """`jax.distributed.initialize` arguments from JAX_NUM_PROCESSES / JAX_PROCESS_ID.

  jax reads JAX_COORDINATOR_ADDRESS itself but not the process count and id (outside a
  managed cluster such as a Cloud TPU slice, which it detects), so they are passed here.
  """
  args = {}
  for var, arg in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
    if env.get(var, "") != "":
      try:
        args[arg] = int(env[var])
      except ValueError:
        raise config_schema.ConfigError(f"{var}={env[var]!r}: expected an int") from None
  return args


def compilation_cache_dir(directory: str, workdir: str) -> str:
  """config.train.compilation_cache_dir resolved: "" (off), a URL or an absolute or ~ path as
  it is, a relative path under the workdir (the default, so a gs:// workdir keeps its cache
  in the bucket, where a relaunch on a new VM finds it)."""
  if not directory or storage.is_url(directory) or directory.startswith(("/", "~")):
    return directory
  return os.fspath(storage.join(workdir, directory))


def use_compilation_cache(directory: str) -> None:
  """Points JAX's persistent compilation cache at `directory` ("" leaves it off), so a
  restarted or resumed run loads its compiled programs instead of compiling them again. A
  URL (gs://...) is handed to JAX as it is. Replaces JAX_COMPILATION_CACHE_DIR's setting."""
  if not directory:
    return
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_compilation_cache_dir", os.fspath(storage.makedirs(directory)))


def launch(config: ConfigDict, workdir: str, distributed: str = "auto") -> None:
  """Validates the config, sets up the hosts and the mesh, then runs the self-play loop."""
  experiment = config_schema.validate(config)
  storage.check_writable(workdir)  # an unreachable or unwritable workdir fails at once
  import jax  # pylint: disable=import-outside-toplevel
  if distributed == "on" or (distributed == "auto" and _several_hosts()):
    jax.distributed.initialize(heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
                               **distributed_args(os.environ))
  from spade_jax import run  # pylint: disable=import-outside-toplevel
  from spade_jax.model import sharding  # pylint: disable=import-outside-toplevel
  try:
    mesh = sharding.make_mesh(experiment.mesh_shape)  # fails now if the slice does not fit the mesh
  except ValueError as err:
    raise config_schema.ConfigError(f"config.mesh: {err} (an axis of -1 takes every device)"
                                  ) from None
  try:
    sharding.engine_mesh(mesh, experiment.engine.replica_chips)  # or its replicas do not split it
  except ValueError as err:
    raise config_schema.ConfigError(f"config.{err}") from None
  print(f"process {jax.process_index()}/{jax.process_count()}: mesh {dict(mesh.shape)}, "
        f"workdir {workdir}", flush=True)
  use_compilation_cache(compilation_cache_dir(experiment.train.compilation_cache_dir, workdir))
  run.run(experiment, workdir, mesh)


def main() -> None:
  # pylint: disable=import-outside-toplevel
  from spade_jax.model.hf_config import CheckpointError
  from spade_jax.multihost import EXIT_PEER_LOST, PeerLost
  from spade_jax.preemption import EXIT_PREEMPTED, Preempted
  try:
    config, workdir, distributed = parse_args(sys.argv)
    launch(config, workdir, distributed)
  except (config_schema.ConfigError, flags.Error, CheckpointError, storage.StorageError
          ) as err:
    # Bad input (a config field, a flag, a damaged or unreadable checkpoint, a workdir that
    # cannot be written): the message names the field, file or URL; exit code 1, no traceback.
    sys.exit(f"error: {err}")
  except Preempted as stop:  # saved at a step boundary; the same command resumes
    print(stop, flush=True)
    sys.exit(EXIT_PREEMPTED)
  except PeerLost as err:
    # The others cannot go on either: no shutdown barrier with a dead process (it would
    # wait for the heartbeat timeout and then abort with a stack dump).
    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(EXIT_PEER_LOST)  # pylint: disable=protected-access


if __name__ == "__main__":
  main()
