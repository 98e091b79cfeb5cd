"""FakePool: the EnvPool interface run IN THE CALLER'S PROCESS, for fast tests only.

*** THIS IS NOT A SANDBOX. *** It `exec`s environment sources inside the trainer's own
interpreter: no timeouts, no memory or process limits, no isolation, and an environment
can change or crash the caller. Use it only with trusted sources (the seed library, test
fixtures) to test the self-play loop quickly. Generated environments go to
`spade_jax.sandbox.pool.SandboxPool`.

It shares everything on the host side of the boundary with the real pool (the runner
that calls the environment, the JSON round trip, coercion, truncation, return checks, the
validation trial played through these same episode calls, and its rules), so it produces
the same records and validation results for well-behaved environments.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from spade_jax.sandbox import coerce, contract, episodes, runner, validate
from spade_jax.sandbox.api import EnvStep, OracleActions, ValidationResult

LIMITS = {"max_obs_chars": contract.MAX_OBS_CHARS, "max_msg_bytes": contract.MAX_MESSAGE_BYTES}


def _decode(data: bytes) -> dict:
  try:
    return coerce.decode(data)
  except coerce.BadOutput as exc:
    return {"err": "bad_output", "detail": str(exc)}


class FakePool:
  """In-process EnvPool for tests of the self-play loop (NOT a sandbox, see module doc)."""

  def __init__(self, max_turns: int = contract.MAX_TURNS_CAP,
               reset_timeout_s: float = contract.DEFAULT_RESET_TIMEOUT_S,
               step_timeout_s: float = contract.DEFAULT_STEP_TIMEOUT_S,
               check_constant: bool = True, require_tools: bool = False,
               require_oracle: bool = False, validation_seed: int | None = None):
    """The settings are SandboxPool's (its timeouts only feed the validation rules here)."""
    self.ledger = episodes.Ledger(max_turns)
    self.validation_seed = validation_seed
    self.reset_timeout_s = reset_timeout_s
    self.step_timeout_s = step_timeout_s
    self.rules = validate.Rules(reset_timeout_s, step_timeout_s, check_constant, require_tools,
                                require_oracle)
    self._envs: dict[Hashable, runner.EnvInstance] = {}

  def validate(self, sources: Sequence[str]) -> list[ValidationResult]:
    return validate.validate_sources(self, sources, self.rules, self.validation_seed)

  def reset(self, episodes_: Sequence[tuple[Hashable, str, int]]) -> list[EnvStep]:
    records = []
    for episode_id, source, seed in episodes_:
      self._envs.pop(episode_id, None)
      class_name, why = episodes.find_class(source)
      if class_name is None:
        self.ledger.live.pop(episode_id, None)
        records.append(coerce.error_record("exception", why))
        continue
      try:
        seed = episodes.seed_value(seed)
      except (TypeError, ValueError) as exc:
        records.append(coerce.error_record("infra", str(exc)))
        continue
      env = runner.EnvInstance(source, class_name, LIMITS)
      reply = _decode(env.reset(seed))
      record = self.ledger.reset_record(episode_id, reply)
      if episode_id in self.ledger.live:
        self._envs[episode_id] = env
      records.append(record)
    return records

  def step(self, actions: Sequence[tuple[Hashable, str | dict]]) -> list[EnvStep]:
    records = []
    for episode_id, action in actions:
      record = self.ledger.unknown(episode_id)
      if record is None:
        data = self._envs[episode_id].step(episodes.wire_action(action))
        record = self.ledger.step_record(episode_id, _decode(data))
        if episode_id not in self.ledger.live:
          del self._envs[episode_id]
      records.append(record)
    return records

  def oracle_actions(self, episode_ids: Sequence[Hashable]) -> list[OracleActions]:
    out = []
    for episode_id in episode_ids:
      env = self._envs.get(episode_id)
      out.append(OracleActions(None, "infra", f"episode {episode_id!r} is not live")
                 if env is None else coerce.oracle_result(_decode(env.oracle())))
    return out

  def close_episodes(self, episode_ids: Sequence[Hashable]) -> None:
    for episode_id in episode_ids:
      self.ledger.live.pop(episode_id, None)
      self._envs.pop(episode_id, None)

  def close(self) -> None:
    self.close_episodes(list(self._envs))
