"""`SelfPlayLoop`: one SPADE training step at a time (docs/selfplay.md has the full story).

A step t (numbered from 1, like the trainer's update count and the checkpoints):
  1. on a refresh step ((t - 1) % k == 0): score the designer samples of the closing window
     (delayed reward), then build the next window's environment set: designer prompts
     (corpus passage, memory sample, target category) -> engine -> parse -> sandbox
     validation; replays from memory fill the budget when `fill_from_memory` is on. In
     `fixed_envs` mode ("grpo", "rlve") the set is drawn from the seed library and no
     designer runs; "rlve" pins each environment at a level drawn from its adaptive window
     (selfplay/rlve.py).
  2. the agent plays every active environment G times without and G times with the hint
     (the fixed-env baselines play only the no-hint arm: no regret is needed);
  3. one GRPO update on the step's agent samples plus the designer samples that came due
     (rows and groups by `designer_advantage`, selfplay/designer_advantage.py; on the run's
     last step, `step(final=True)`, also the last refresh's designs); the engine then
     samples from the new weights;
  4. every played environment is upserted into the memory with its window's statistics.
It returns a `StepRecord` for the metrics writer. All randomness is derived from
(seed, step, purpose), so `state_dict()` (memory, curriculum, corpus position, step) is all
a resumed run needs besides the trainer's own checkpoint; `state_dict()["steps_done"]` is the
number of completed steps, and the next `step()` runs step `state_dict()["steps_done"] + 1`.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from spade_jax.checks import require
from spade_jax.envs.difficulty import at_level, declared_levels
from spade_jax.selfplay import batching, designer, designer_rewards
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.designer_advantage import designer_targets
from spade_jax.selfplay.episodes import Episode, EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.memory import EnvMemory, MemoryEntry
from spade_jax.selfplay.record import ARMS, EnvReport, StepRecord
from spade_jax.selfplay.rlve import DifficultyWindows
from spade_jax.selfplay.schedule import ActiveEnv, EnvSchedule, PendingDesign, split_budget
from spade_jax.selfplay.seeding import derive_rng, derive_seed
from spade_jax.selfplay.timing import Timings


@dataclasses.dataclass
class _Refresh:
  envs: list[ActiveEnv]
  designs: list[PendingDesign]
  requests: int = 0
  valid: int = 0
  invalid_reasons: dict[str, int] = dataclasses.field(default_factory=dict)


class SelfPlayLoop:
  """Runs self-play steps with injected engine, sandbox pool, tokenizer and trainer.

  `trainer` needs `train_step(TrainBatch) -> dict[str, float]` and `params` (what the engine
  loads after each update). `corpus` needs `take(n)` of passages with `.doc_id`, `.text` and
  `.origin`, and `state_dict()` / `load_state_dict()`. `seed_envs` holds the seed library's
  environments as memory entries (origin "seed"): the initial memory and the fixed-environment
  set.
  """

  def __init__(self, config: SelfPlayConfig, *, engine, pool, tokenizer, trainer,
               corpus, seed_envs: Sequence[MemoryEntry], memory: EnvMemory | None = None):
    self.config = config
    self.engine, self.pool, self.trainer, self.corpus = engine, pool, trainer, corpus
    self.tokenizer = tokenizer
    self.formatter = ChatFormatter(tokenizer)
    self.seed_envs = [e for e in seed_envs if e.category in config.skills]
    require(len(self.seed_envs) >= config.min_library_size, "selfplay.num_envs",
            config.num_envs, f"<= {len(self.seed_envs)}, the library environments of the "
            f"skills {config.skills} that selfplay.fixed_envs={config.fixed_envs!r} plays "
            "a step")
    self.memory = memory if memory is not None else EnvMemory(
        config.memory_capacity, [dataclasses.replace(e) for e in self.seed_envs])
    self.schedule = EnvSchedule(config.k)
    self.rlve = None
    if config.fixed_envs == "rlve":
      levels = {e.uid: declared_levels(e.source) for e in self.seed_envs}
      self.rlve = DifficultyWindows({u: n for u, n in levels.items() if n}, config.group_size)
    self.arms = ("no_hint",) if config.fixed_envs else ARMS
    self.reward_fn = designer_rewards.get_designer_reward(config.designer_reward)
    stops = tuple(tokenizer.stop_ids)
    self.designer_params = dataclasses.replace(config.designer_sampling, stop_token_ids=stops)
    self.agent_params = dataclasses.replace(config.agent_sampling, stop_token_ids=stops)
    self.steps_done = 0  # completed steps
    self.num_updates = 0  # trainer updates made (the designer's behaviour-policy age)

  # ----------------------------------------------------------------------- checkpoints
  def state_dict(self) -> dict[str, Any]:
    """JSON-ready host state: steps done, memory, curriculum window and corpus position."""
    return {"steps_done": self.steps_done, "updates": self.num_updates,
            "memory": self.memory.state_dict(),
            "curriculum": self.schedule.state_dict(),
            "corpus": self.corpus.state_dict() if self.corpus is not None else None,
            "rlve": self.rlve.state_dict() if self.rlve is not None else None}

  def load_state_dict(self, state: dict[str, Any]) -> None:
    # A checkpoint written before "steps_done" was named calls it "step".
    self.steps_done = int(state["steps_done"] if "steps_done" in state else state["step"])
    self.num_updates = int(state.get("updates", self.steps_done))
    self.memory.load_state_dict(state["memory"])
    self.schedule.load_state_dict(state["curriculum"])
    if self.corpus is not None and state.get("corpus") is not None:
      self.corpus.load_state_dict(state["corpus"])
    if self.rlve is not None and state.get("rlve") is not None:
      self.rlve.load_state_dict(state["rlve"])

  # ------------------------------------------------------------------------- the step
  def step(self, final: bool = False) -> StepRecord:
    """Runs the next step; `final` (the run's last step) also trains the pending designs."""
    t, s = self.steps_done + 1, self.config
    timings = Timings()
    start = time.perf_counter()
    refresh = _Refresh([], [])
    scored = []
    refreshed = self.schedule.is_refresh(t)
    if refreshed:
      scored = self.schedule.close_window(t, self.reward_fn)
      refresh = self._refresh(t, timings)
      self.schedule.open_window(t, refresh.envs, refresh.designs if s.train_designer else [])
    episodes = self._play(t, timings)
    reports = self._record_play(episodes)
    if self.rlve is not None:
      for report in reports:
        self.rlve.record(report.uid, report.difficulty, report.returns["no_hint"])
      self.rlve.update()
    if final:  # the last window's designs can never come due: train them now
      scored += self.schedule.close_window(t, self.reward_fn, final=True)
    samples = batching.agent_samples(episodes, t, s.train_agent_on_hint_arm)
    n_agent = len(samples)
    targets = designer_targets(
        scored, s.designer_advantage, by_category=s.designer_group_by_category,
        invalid_reward=s.invalid_designer_reward,
        validity_weight=s.validity_weight) if s.train_designer else []
    samples += batching.designer_samples(targets)
    train_metrics: dict[str, float] = {}
    if samples:
      with timings.phase("train_s"):
        train_metrics = self.trainer.train_step(
            batching.build_train_batch(samples, self.tokenizer.pad_id))
        self.engine.load_weights(self.trainer.params)
      if targets:
        train_metrics["designer/behaviour_age"] = sum(
            self.num_updates - x.design.policy_version for x in targets) / len(targets)
      self.num_updates += 1
    self._update_memory(t)
    self.steps_done = t
    times = {"generate_s": 0.0, "sandbox_s": 0.0, "train_s": 0.0, **timings.as_dict(),
             "step_s": time.perf_counter() - start}
    active = self.schedule.active
    return StepRecord(
        step=t, refreshed=refreshed, num_envs=s.num_envs,
        designer_requests=refresh.requests, designer_valid=refresh.valid,
        designer_invalid_reasons=refresh.invalid_reasons,
        designed_envs=sum(e.origin == "designed" for e in active),
        replayed_envs=sum(e.origin != "designed" for e in active), envs=reports,
        agent_samples=n_agent, designer_samples=len(samples) - n_agent,
        designer_rewards=[x.reward for x in targets],
        designer_regrets=[x.reward for x in targets if x.design.env_uid is not None],
        designs_without_regret=sum(
            x.valid and x.reward is None for x in scored) if s.train_designer else 0,
        envs_without_regret=sum(r.regret is None for r in reports) if self.arms == ARMS else 0,
        dropped_episodes=sum(e.dropped for e in episodes),
        unplayable_episodes=sum(e.unplayable for e in episodes),
        episode_errors=dict(collections.Counter(e.error_kind for e in episodes
                                                if e.error_kind is not None)),
        train_metrics=dict(train_metrics), timings=times, memory_size=len(self.memory),
        memory_uids=[e.uid for e in self.memory.entries])

  # ------------------------------------------------------------------------- refresh
  def _categories(self, t: int) -> list[str]:
    s = self.config
    picked = derive_rng(s.seed, "categories", t).choice(
        len(s.skills), size=s.categories_per_step, replace=False)
    return [s.skills[i] for i in sorted(picked)]

  def _refresh(self, t: int, timings: Timings) -> _Refresh:
    s = self.config
    if s.fixed_envs:
      return _Refresh(self._fixed_envs(t), [])
    slots = split_budget(s.num_envs, self._categories(t))
    passages = self.corpus.take(len(slots)) if s.use_corpus else [None] * len(slots)
    requests = []
    for i, (category, passage) in enumerate(zip(slots, passages, strict=True)):
      memory = ()
      if s.use_memory and s.memory_sample_size:
        rng = derive_rng(s.seed, "memory", t, i)
        memory = tuple(e.view() for e in self.memory.sample(s.memory_sample_size, rng,
                                                            categories=[category]))
      requests.append(designer.DesignRequest(
          i, category, passage.doc_id if passage else None, passage.text if passage else None,
          memory, passage.origin if passage else None))
    params = dataclasses.replace(self.designer_params, seed=derive_seed(s.seed, "designer", t))
    samples = designer.generate_designs(
        self.engine, self.pool, self.formatter, requests, params, setting=s.setting, step=t,
        timings=timings, max_prompt_tokens=s.max_prompt_tokens(params), reward=s.designer_reward,
        style=s.designer_prompt)
    out = _Refresh([], [], requests=len(samples))
    for d in samples:
      uid = f"d{t}.{d.index}" if d.valid else None
      if d.valid:
        out.envs.append(ActiveEnv(uid, "designed", d.category, d.source, d.hint, d.max_turns, t))
      out.designs.append(PendingDesign(t, t + s.k, d.index, d.category,
                                       d.prompt_ids + d.output_ids, len(d.prompt_ids),
                                       list(d.logprobs), uid, d.error, self.num_updates))
    out.valid = len(out.envs)
    out.invalid_reasons = dict(collections.Counter(d.error for d in samples if not d.valid))
    missing = s.num_envs - out.valid
    if s.fill_from_memory and missing > 0:
      wanted = sorted({d.category for d in samples if not d.valid})
      rng = derive_rng(s.seed, "replay", t)
      for e in self.memory.sample(missing, rng, categories=wanted):
        out.envs.append(ActiveEnv(e.uid, "replayed", e.category, e.source, e.hint,
                                  e.max_turns, t))
    return out

  def _fixed_envs(self, t: int) -> list[ActiveEnv]:
    """Fixed-env baselines: walk a seeded permutation of the seed library (RLVE: at a level)."""
    s, lib = self.config, self.seed_envs
    order = derive_rng(s.seed, "fixed").permutation(len(lib))
    first = ((t - 1) // s.k) * s.num_envs
    picked = [lib[order[(first + i) % len(lib)]] for i in range(s.num_envs)]
    envs = []
    for e in picked:
      level = None if self.rlve is None else self.rlve.sample_level(
          e.uid, derive_rng(s.seed, "rlve", t, e.uid))
      source = e.source if level is None else at_level(e.source, level)
      envs.append(ActiveEnv(e.uid, "fixed", e.category, source, e.hint, e.max_turns, t,
                            difficulty=level))
    return envs

  # ---------------------------------------------------------------------------- play
  def _play(self, t: int, timings: Timings) -> list[Episode]:
    s = self.config
    specs = []
    for env in self.schedule.active:
      cap = min(s.max_turns, env.max_turns) if env.max_turns else s.max_turns
      for arm in self.arms:
        for g in range(s.group_size):
          # The reset seed leaves out the arm: the g-th episodes of the two arms play the same
          # instance, so the hint is all that differs between them (paired regret).
          specs.append(EpisodeSpec(
              key=(t, env.uid, arm, g), env_uid=env.uid, arm=arm, source=env.source,
              hint=env.hint if arm == "hint" else None,
              seed=derive_seed(s.seed, "reset", t, env.uid, g),
              sample_seed=derive_seed(s.seed, "sample", t, env.uid, arm, g), max_turns=cap))
    if not specs:
      return []
    play = EpisodeSettings(s.action_format, self.agent_params,
                           s.max_prompt_tokens(self.agent_params))
    return play_episodes(self.engine, self.pool, self.formatter, specs, play, timings)

  def _record_play(self, episodes: list[Episode]) -> list[EnvReport]:
    """Adds the step's returns to each active environment's window; builds the reports."""
    by_env: dict[str, dict[str, list[Episode]]] = collections.defaultdict(
        lambda: {arm: [] for arm in ARMS})
    for ep in episodes:
      by_env[ep.spec.env_uid][ep.spec.arm].append(ep)
    reports = []
    for env in self.schedule.active:
      arms = by_env[env.uid]
      kept = {arm: [e for e in arms[arm] if e.playable] for arm in ARMS}
      returns = {arm: [e.episode_return for e in kept[arm]] for arm in ARMS}
      env.returns.add_step(returns["no_hint"], returns["hint"])
      win = {arm: designer_rewards.mean(returns[arm]) for arm in ARMS}
      first = next((e.first_observation for arm in ARMS for e in kept[arm]
                    if e.first_observation), "")
      reports.append(EnvReport(
          uid=env.uid, origin=env.origin, category=env.category, source=env.source,
          hint=env.hint, first_observation=first, returns=returns,
          step_rewards={arm: [r for e in kept[arm] for r in e.rewards] for arm in ARMS},
          win_rate=win,
          regret=None if None in win.values() else win["hint"] - win["no_hint"],
          dropped_episodes=sum(e.dropped for arm in ARMS for e in arms[arm]),
          transcript={arm: next((e.transcript() for e in kept[arm] if e.messages), "")
                      for arm in ARMS}, difficulty=env.difficulty))
    return reports

  def _update_memory(self, t: int) -> None:
    """Upserts the window's statistics; `times_played` counts windows, not steps."""
    for env in self.schedule.active:
      stats = dict(win_rate_no_hint=env.returns.pooled_mean("no_hint"),
                   win_rate_hint=env.returns.pooled_mean("hint"),
                   regret=designer_rewards.hint_regret(env.returns), step=t)
      if env.uid in self.memory:
        entry = self.memory.get(env.uid)
        new_window = int(t == env.refresh_step)
        self.memory.upsert(dataclasses.replace(
            entry, times_played=entry.times_played + new_window, **stats))
      else:
        self.memory.upsert(MemoryEntry(env.uid, env.source, env.hint, env.category,
                                       origin="designed" if env.origin == "designed" else "seed",
                                       max_turns=env.max_turns, times_played=1, **stats))

