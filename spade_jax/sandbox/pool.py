"""SandboxPool: runs generated environments in jailed processes (implements api.EnvPool).

Every episode runs in its own process, forked from a worker's clean zygote, and is
killed (its whole process group) when it ends, fails, times out or is closed: no
interpreter state, thread or child process outlives its episode. Calls are batched: one
poll loop sends every request and reads every reply, each against its own deadline, so
episodes on different workers (and different episodes on one worker) run in parallel and
none can use up another's time. Between its calls an episode process is stopped
(SIGSTOP once its reply is read, SIGCONT once its next request is written), so it runs
only while the host waits for it. While it waits, the pool also keeps the live episodes'
memory together under a budget (memcap.py), killing the largest when they exceed it.
Nothing an environment does raises here: each failure becomes an error record, and
failures of the sandbox itself are marked `infra`. A worker that dies is replaced on
next use. See docs/sandbox.md for the layers and what each defends against.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import resource
import signal
from collections.abc import Hashable, Sequence

from spade_jax.sandbox import cgroups, channel, coerce, contract, episodes, memcap, validate
from spade_jax.sandbox import isolation as isolation_lib
from spade_jax.sandbox.api import EnvStep, OracleActions, ValidationResult
from spade_jax.sandbox.config import SandboxConfig
from spade_jax.sandbox.worker_handle import WorkerError, WorkerHandle

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Proc:
  """A live episode process: its worker, its token there, the host ends of its pipes, its
  pidfd (-1 until the fork is acknowledged) and memory probe, and why the memory cap killed
  it."""
  worker: WorkerHandle
  token: int
  req: int
  resp: int
  pidfd: int = -1
  memory: memcap.Probe | None = None
  memory_kill: str | None = None

  def pause(self) -> None:
    """Stops the process (SIGSTOP) until its next call: an environment runs only while the
    host waits for it, so a signal handler or timer cannot burn CPU between calls."""
    self._signal(signal.SIGSTOP)

  def resume(self) -> None:
    self._signal(signal.SIGCONT)

  def kill_for_memory(self, why: str) -> None:
    """Kills the process now; its call (this one or the next) becomes a crash record."""
    self.memory_kill = why
    self._signal(signal.SIGKILL)

  def _signal(self, signum: int) -> None:
    try:
      signal.pidfd_send_signal(self.pidfd, signum)
    except ProcessLookupError:  # it exited: its call reports that
      pass

  def close(self) -> None:
    for fd in (self.req, self.resp, self.pidfd):
      if fd >= 0:
        os.close(fd)
    if self.memory is not None:
      self.memory.close()


def _raise_fd_limit() -> None:
  """Each live episode holds two pipe ends in the trainer: lift the soft fd limit."""
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  want = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
  if soft != resource.RLIM_INFINITY and soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class SandboxPool:
  """The process pool; construct once (from a long-lived thread) and `close` at the end."""

  def __init__(self, num_workers: int = SandboxConfig.num_workers,
               max_turns: int = contract.MAX_TURNS_CAP,
               reset_timeout_s: float = SandboxConfig.reset_timeout_s,
               step_timeout_s: float = SandboxConfig.step_timeout_s,
               memory_mb: int = SandboxConfig.memory_mb,
               isolation: str = SandboxConfig.isolation,
               check_constant: bool = True, require_tools: bool = False,
               require_oracle: bool = SandboxConfig.require_oracle,
               validation_seed: int | None = None,
               episodes_memory_mb: int | None = SandboxConfig.episodes_memory_mb,
               cpu_s: int = 60, fsize_mb: int = 1, nofile: int = 32,
               worker_memory_mb: int = 8192, worker_pids: int = 4096):
    """Detects the host's isolation layers, starts the workers and runs one smoke episode.

    The defaults of the settings config.sandbox holds are `SandboxConfig`'s.

    num_workers: jails (zygotes); each hosts any number of live episode processes, which
      run in parallel, so this bounds fault blast radius and fork throughput, not
      concurrency. max_turns: the framework's turn cap (an environment's own max_turns
      can only lower it). memory_mb, cpu_s, fsize_mb, nofile: rlimits of each episode
      process. episodes_memory_mb: the aggregate cap on the live episodes' memory
      (memcap.py); None is memcap.DEFAULT_FRACTION of the host's available memory.
      worker_memory_mb, worker_pids: cgroup caps per worker where available.
    isolation: "strict" | "basic" | "none", the least the pool accepts (isolation.py).
    check_constant, require_tools, require_oracle: validation rules (validate.Rules).
    validation_seed: None draws each validation's seeds and actions afresh at random (as
      training seeds are drawn); an int makes them the same on every call (tests).
    Raises SandboxUnavailable (isolation.py) when the host cannot provide it.
    """
    _raise_fd_limit()
    self.layers = isolation_lib.detect_layers()
    self.setup = isolation_lib.worker_setup(isolation, self.layers)
    self.limits = {"memory_mb": memory_mb, "cpu_s": cpu_s, "fsize_mb": fsize_mb,
                   "nofile": nofile, "nproc": 1, "worker_memory_mb": worker_memory_mb,
                   "worker_pids": worker_pids}
    self.reset_timeout_s, self.step_timeout_s = reset_timeout_s, step_timeout_s
    self.validation_seed = validation_seed
    self.rules = validate.Rules(reset_timeout_s, step_timeout_s, check_constant, require_tools,
                                require_oracle)
    self.ledger = episodes.Ledger(max_turns)
    self.memory_cap = memcap.MemoryCap(memcap.default_budget_mb() if episodes_memory_mb is None
                                       else episodes_memory_mb)
    cgroups.sweep(self.setup["cgroups"])
    self._live: dict[Hashable, _Proc] = {}
    self._workers: list[WorkerHandle | None] = [None] * num_workers
    try:
      for i in range(num_workers):
        self._workers[i] = WorkerHandle(i, self.setup, self.limits)
      for w in self._workers:
        w.wait_ready()
      smoke = self.reset([("__smoke__", contract.EXAMPLE_ENV, 0)])[0]
    except WorkerError as exc:
      self.close()
      raise isolation_lib.SandboxUnavailable(str(exc)) from None
    self.close_episodes(["__smoke__"])
    if smoke.error_kind is not None:
      self.close()
      raise isolation_lib.SandboxUnavailable(f"sandbox smoke test failed: {smoke.error_detail}")

  def __enter__(self) -> SandboxPool:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  # Workers and episode processes.

  def _pick_worker(self) -> WorkerHandle:
    """The least loaded worker, replacing dead ones; raises WorkerError."""
    for i, w in enumerate(self._workers):
      if w is None or not w.alive:
        if w is not None:
          log.warning("sandbox worker %d died; replacing it", i)
          w.stop()
        self._workers[i] = None
        self._workers[i] = WorkerHandle(i, self.setup, self.limits)
        self._workers[i].wait_ready()
    return min(self._workers, key=lambda w: len(w.live))

  def _start(self, requests: list[tuple[Hashable, bytes]], timeout_s: float, max_bytes: int
             ) -> dict[Hashable, tuple[_Proc | None, str, bytes | str]]:
    """Forks an episode process per (key, first request), sends it, waits for the replies.

    What fits in the pipes goes out while the zygotes are still forking; the timeout counts
    from the moment every fork is acknowledged, so a slow zygote never makes an environment
    time out. Returns key -> (process, status, reply); the process is None, the status
    "infra" and the reply the reason when no process could be made.
    """
    procs, calls, out = {}, {}, {}
    for key, payload in requests:
      try:
        w = self._pick_worker()
        procs[key] = proc = _Proc(w, *w.send_spawn())
      except (WorkerError, OSError) as exc:
        out[key] = (None, "infra", str(exc))
        continue
      calls[key] = channel.Call(proc.req, proc.resp, payload)
      calls[key].send()
    failed = self._confirm(procs)
    started = {key: call for key, call in calls.items() if key not in failed}
    for key, reply in self._run(started, procs, timeout_s, max_bytes).items():
      out[key] = (procs[key], *reply)
    self._release([procs[key] for key in failed])
    for key, reason in failed.items():
      out[key] = (None, "infra", reason)
    return out

  def _confirm(self, procs: dict[Hashable, _Proc]) -> dict[Hashable, str]:
    """Reads the zygotes' fork acknowledgements (and pidfds); key -> reason for each failed
    fork."""
    failed = {}
    for w in {p.worker for p in procs.values()}:
      mine = {p.token: key for key, p in procs.items() if p.worker is w}
      try:
        acks = w.receive_acks(list(mine))
      except (WorkerError, OSError, ValueError) as exc:
        w.stop()
        acks = {token: (-1, f"worker {w.index} failed: {exc}") for token in mine}
      for token, key in mine.items():
        pidfd, why = acks.get(token, (-1, f"worker {w.index} did not acknowledge the fork"))
        if why:
          failed[key] = why
        else:
          procs[key].pidfd, procs[key].memory = pidfd, memcap.Probe(pidfd)
    return failed

  def _release(self, procs: list[_Proc]) -> None:
    """Kills episode processes (one message per worker) and closes their descriptors."""
    for w in {p.worker for p in procs}:
      w.kill([p.token for p in procs if p.worker is w])
    for p in procs:
      p.close()

  def _exchange(self, items: list[tuple[Hashable, _Proc, bytes]], timeout_s: float,
                max_bytes: int) -> dict[Hashable, tuple[str, bytes]]:
    """Sends each request, continues its process and waits for its reply.

    The request goes into the pipe before the process continues, so the process wakes
    once, to a request it can read.
    """
    calls = {}
    for key, proc, payload in items:
      calls[key] = channel.Call(proc.req, proc.resp, payload)
      calls[key].send()
      proc.resume()
    return self._run(calls, {key: proc for key, proc, _ in items}, timeout_s, max_bytes)

  def _run(self, calls: dict[Hashable, channel.Call], procs: dict[Hashable, _Proc],
           timeout_s: float, max_bytes: int) -> dict[Hashable, tuple[str, bytes]]:
    """Runs the calls; each process is stopped as soon as its call ends (however it ends).

    The memory cap is checked while the calls run and once more when they have all ended.
    """
    def check(force: bool = False) -> None:
      if force or self.memory_cap.due():
        self._cap_memory([*procs.values(), *self._live.values()])

    results = {}
    for key, status, payload in channel.exchange(calls, timeout_s, max_bytes, check,
                                                 memcap.CHECK_INTERVAL_S):
      procs[key].pause()
      results[key] = (status, payload)
    check(force=True)
    return results

  def _cap_memory(self, procs: list[_Proc]) -> None:
    """Kills the largest live episode processes while their memory is over the budget."""
    procs = [p for p in {id(p): p for p in procs}.values()
             if p.memory is not None and p.memory_kill is None]
    for i, why in self.memory_cap.over_budget([p.memory for p in procs]).items():
      procs[i].kill_for_memory(why)

  def _record(self, status: str, payload: bytes, proc: _Proc, timeout_s: float,
              on_reply) -> EnvStep:
    if proc.memory_kill is not None:
      return coerce.error_record("crash", proc.memory_kill)
    if status == channel.OK:
      try:
        return on_reply(coerce.decode(payload))
      except coerce.BadOutput as exc:
        return coerce.error_record("bad_output", str(exc))
      except Exception as exc:  # whatever a reply holds, it is this episode's error alone
        return coerce.error_record("bad_output", f"the reply cannot be read: "
                                   f"{type(exc).__name__}: {exc}")
    if status == channel.TIMEOUT:
      return coerce.error_record("timeout", f"no reply within {timeout_s:g} s")
    if status == channel.TOO_BIG:
      return coerce.error_record("bad_output", "reply exceeds the size cap")
    if proc.worker.alive:
      return coerce.error_record(
          "crash", "the environment's process died (memory or CPU limit, a signal, os._exit)")
    return coerce.error_record("infra", f"sandbox worker {proc.worker.index} died")

  # The EnvPool interface.

  def validate(self, sources: Sequence[str]) -> list[ValidationResult]:
    """Each source's verdict; its trial episodes are played like any others (validate.py)."""
    return validate.validate_sources(self, sources, self.rules, self.validation_seed)

  def reset(self, episodes_: Sequence[tuple[Hashable, str, int]]) -> list[EnvStep]:
    records: list[EnvStep | None] = [None] * len(episodes_)
    requests, ended = [], []
    self.close_episodes([episode_id for episode_id, _, _ in episodes_])
    seen = set()
    for i, (episode_id, source, seed) in enumerate(episodes_):
      class_name, why = episodes.find_class(source)
      if episode_id in seen:
        records[i] = coerce.error_record("infra", f"episode {episode_id!r} reset twice")
        continue
      seen.add(episode_id)
      if class_name is None:
        records[i] = coerce.error_record("exception", why)
        continue
      try:
        payload = {"op": "reset", "source": source, "class": class_name,
                   "seed": episodes.seed_value(seed)}
      except (TypeError, ValueError) as exc:
        records[i] = coerce.error_record("infra", str(exc))
        continue
      requests.append((i, json.dumps(payload).encode()))
    for i, (proc, status, payload) in self._start(requests, self.reset_timeout_s,
                                                  contract.MAX_MESSAGE_BYTES).items():
      episode_id = episodes_[i][0]
      if proc is None:
        records[i] = coerce.error_record("infra", payload)
        continue
      records[i] = self._record(status, payload, proc, self.reset_timeout_s,
                                lambda m, e=episode_id: self.ledger.reset_record(e, m))
      if episode_id in self.ledger.live:
        self._live[episode_id] = proc
      else:
        ended.append(proc)
    self._release(ended)
    return records

  def step(self, actions: Sequence[tuple[Hashable, str | dict]]) -> list[EnvStep]:
    records: list[EnvStep | None] = [None] * len(actions)
    items, seen, ended = [], set(), []
    for i, (episode_id, action) in enumerate(actions):
      records[i] = self.ledger.unknown(episode_id)
      if episode_id in seen:
        records[i] = coerce.error_record("infra", f"episode {episode_id!r} stepped twice")
      if records[i] is None:
        seen.add(episode_id)
        payload = {"op": "step", "action": episodes.wire_action(action)}
        items.append((i, self._live[episode_id], json.dumps(payload).encode()))
    replies = self._exchange(items, self.step_timeout_s, contract.MAX_MESSAGE_BYTES)
    for i, proc, _ in items:
      episode_id = actions[i][0]
      records[i] = self._record(*replies[i], proc, self.step_timeout_s,
                                lambda m, e=episode_id: self.ledger.step_record(e, m))
      if records[i].error_kind is not None or episode_id not in self.ledger.live:
        ended.append(episode_id)
    self.close_episodes(ended)
    return records

  def oracle_actions(self, episode_ids: Sequence[Hashable]) -> list[OracleActions]:
    """oracle_actions() of live episodes (call it right after their reset), batched.

    The episodes stay live; one whose call fails (or that is not live) gets the error.
    """
    out: list[OracleActions | None] = [None] * len(episode_ids)
    items, seen = [], set()
    for i, episode_id in enumerate(episode_ids):
      if episode_id in self._live and episode_id not in seen:
        seen.add(episode_id)
        items.append((i, self._live[episode_id], b'{"op": "oracle"}'))
      else:
        out[i] = OracleActions(None, "infra", f"episode {episode_id!r} is not live (or repeated)")
    replies = self._exchange(items, self.step_timeout_s, contract.MAX_MESSAGE_BYTES)
    for i, proc, _ in items:
      result = self._record(*replies[i], proc, self.step_timeout_s, coerce.oracle_result)
      out[i] = result if isinstance(result, OracleActions) else OracleActions(
          None, result.error_kind, result.error_detail)
    return out

  def close_episodes(self, episode_ids: Sequence[Hashable]) -> None:
    procs = []
    for episode_id in episode_ids:
      self.ledger.live.pop(episode_id, None)
      proc = self._live.pop(episode_id, None)
      if proc is not None:
        procs.append(proc)
    self._release(procs)

  def close(self) -> None:
    """Kills every worker (and so every episode process); the pool is unusable afterwards."""
    self.ledger.live.clear()
    for proc in self._live.values():
      proc.close()
    self._live.clear()
    for w in self._workers:
      if w is not None:
        w.stop()
    self._workers = []
