"""Supervised examples of both roles, in exactly the token sequences the self-play loop makes.

Designer: the loop's own request (`designer.DesignRequest`: target category, a training
passage cut as the corpus cuts it, a memory sample drawn as the loop draws it) rendered by
`designer.fitted_prompt`; the target is the environment as `designer.format_designer_output`
writes it, checked to parse back to the same source and hint with the loop's parser, then
the end-of-turn token the engine stops on.

Agent: each environment is reset in the sandbox pool, its `oracle_actions()` read there
(`SandboxPool.oracle_actions`), and the actions played as scripted replies in the action format
through the loop's episode runner (`episodes.play_episodes`, with a `FakeEngine` in place of
the model): prompts, observation turns and the loss mask (1 on replies only) are the loop's,
for both arms. Where the hint carries a strategy the agent would not play untold (a peek
game's), the arms differ: an arm that was not told it plays `minigames.untold_plan` most of the
time (kind "untold"), so the hinted arm is the one that learns the strategy. A reply puts a
space between the tag and the action (`ACTION_LEAD`, which the loop's parser strips): the byte-
level BPE then cuts the action word into the pieces that the observation's "Actions: word ..."
has, so the reply can copy them; glued to the tag the word is other pieces ("<action>guess" is
g|uess against the observation's " guess"), a gap that only spelling bridges, and a model this
small cannot spell. A share of imperfect episodes (a wrong action played before the right one
or in its place, or the last one left out) comes with them; every return is the sandbox's.

Copy rows: random ordinary tokens followed by the same span again, loss on the repeat. They
keep the induction circuit that the build writes and pretraining keeps (starter.copy_circuit)
alive through fine-tuning, which without them wipes it out (bench/RESULTS_LOG.md, "The starter
cannot copy"); the agent needs it to copy an action word from the observation.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Hashable, Sequence

from proj.starter import minigames
from proj.starter.copy_test import FIRST_ORDINARY_ID
from proj.starter.passages import heldout_passages, split_documents, train_passages
from proj.starter.variants import VariantEnv
from spade_jax.engine.fake import FakeEngine
from spade_jax.sandbox.contract import ORACLE_MIN_RETURN
from spade_jax.selfplay import corpus, designer, replies
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.episodes import EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.memory import EnvMemory, MemoryEntry
from spade_jax.selfplay.seed_envs import seed_entries
from spade_jax.selfplay.seeding import derive_rng, derive_seed
from spade_jax.selfplay.timing import Timings

log = logging.getLogger(__name__)
ARMS = ("no_hint", "hint")
IMPERFECT_TRIES = 3  # corruptions tried per imperfect episode before it is given up
CHUNK = 64  # episodes live in the sandbox at once
ACTION_LEAD = " "  # before the action inside the reply's tag (module doc)

__all__ = ["SFTExample", "agent_examples", "copy_examples", "designer_examples",
           "heldout_passages", "train_passages"]


@dataclasses.dataclass(frozen=True)
class SFTExample:
  tokens: list[int]  # the whole token sequence (chat-formatted)
  loss_mask: list[int]  # 1 on target tokens (what the model must learn to emit), else 0
  role: str  # "designer" | "agent" | "copy"
  meta: dict  # uid, base, category; designer: passage_id, memory; agent: arm, kind, return


def _memory(envs: Sequence[VariantEnv], selfplay: SelfPlayConfig
            ) -> tuple[EnvMemory, dict[str, str]]:
  """The loop's library memory (`seed_entries`, train split) plus the set as designed ones.

  Also each entry's base (uid -> seed game or minigame family), so that a request can show
  a sibling.
  """
  entries = seed_entries(selfplay, split="train")
  bases = {e.uid: library_base(e.uid) for e in entries} | {e.uid: e.base for e in envs}
  entries += [MemoryEntry(e.uid, e.source, e.hint, e.category, "designed", -1) for e in envs]
  return EnvMemory(max(selfplay.memory_capacity, len(entries)), entries), bases


def library_base(uid: str) -> str:
  """The seed game or minigame family of a library entry: "seed/<name>", "mg<seed>/<family>/<i>"."""
  return uid.split("/")[1]


def design_request(env: VariantEnv, j: int, memory: EnvMemory, bases: dict[str, str],
                   documents: Sequence, selfplay: SelfPlayConfig, seed: int, max_chars: int
                   ) -> designer.DesignRequest:
  """The j-th designer request whose answer is `env`: a passage and a memory sample.

  The memory sample's first entry is one of `env`'s siblings (the seed game it came from or
  another variant of it): the target is then an edit of an environment in the prompt, which
  is what the designer does with its memory in the loop, and a copy-and-edit a small model
  can learn; with unrelated memory the target would have to be recalled whole. The rest are
  drawn as the loop draws them (its category first).
  """
  passage = None
  if selfplay.use_corpus:
    pick = int(derive_rng(seed, "starter-passage", env.uid, j).integers(len(documents)))
    passage = corpus.passage_of(documents[pick], max_chars)
  views = ()
  if selfplay.use_memory and selfplay.memory_sample_size:
    rng = derive_rng(seed, "starter-memory", env.uid, j)
    n = selfplay.memory_sample_size
    sibling = memory.sample(1, rng, categories=[env.category], exclude=_not_siblings(env, bases))
    rest = memory.sample(n - len(sibling), rng, categories=[env.category],
                         exclude=[env.uid, *(m.uid for m in sibling)])
    views = tuple(m.view() for m in sibling + rest)
  return designer.DesignRequest(j, env.category, passage and passage.doc_id,
                                passage and passage.text, views, passage and passage.origin)


def _not_siblings(env: VariantEnv, bases: dict[str, str]) -> list[str]:
  """Every memory uid but env's siblings (env itself included)."""
  return [uid for uid, base in bases.items() if base != env.base or uid == env.uid]


def designer_examples(envs: Sequence[VariantEnv], tokenizer, selfplay: SelfPlayConfig, *,
                      seed: int = 0, per_env: int = 1,
                      max_chars: int = corpus.DEFAULT_MAX_CHARS) -> list[SFTExample]:
  """per_env examples per environment; max_chars is config.corpus.max_chars.

  An example whose target is longer than sampling.designer.max_new_tokens (the loop would
  cut it) is left out, with one warning for all of them.
  """
  formatter = ChatFormatter(tokenizer)
  documents = split_documents()[0]
  memory, bases = _memory(envs, selfplay)
  limit = selfplay.max_prompt_tokens(selfplay.designer_sampling)
  out, too_long = [], 0
  for env in envs:
    target = tokenizer.encode(designer.format_designer_output(env.source, env.hint))
    parsed = designer.parse_designer_output(tokenizer.decode(target))
    if (parsed.source, parsed.hint) != (env.source, env.hint.strip()):
      raise ValueError(f"{env.uid}: the designer target does not parse back to its source and "
                       f"hint through this tokenizer ({parsed.error or 'text differs'})")
    target.append(tokenizer.eos_id)
    if len(target) > selfplay.designer_sampling.max_new_tokens:
      too_long += per_env
      continue
    for j in range(per_env):
      req = design_request(env, j, memory, bases, documents, selfplay, seed, max_chars)
      prompt = designer.fitted_prompt(formatter, req, selfplay.setting, limit,
                                      selfplay.designer_reward, selfplay.designer_prompt)
      out.append(SFTExample(prompt + target, [0] * len(prompt) + [1] * len(target), "designer",
                            {"uid": env.uid, "base": env.base, "category": env.category,
                             "passage_id": req.passage_id,
                             "memory": [_memory_uid(memory, v) for v in req.memory],
                             "prompt_tokens": len(prompt)}))
  if too_long:
    log.warning("left out %d designer examples whose target exceeds sampling.designer."
                "max_new_tokens=%d", too_long, selfplay.designer_sampling.max_new_tokens)
  return out


def _memory_uid(memory: EnvMemory, view) -> str:
  return next(e.uid for e in memory.entries if e.view() == view)


def copy_examples(vocab_size: int, count: int, *, seed: int = 0, min_span: int = 24,
                  max_span: int = 120) -> list[SFTExample]:
  """`count` copy rows: a span of random ordinary tokens (length drawn from [min_span,
  max_span]) then the same span again, loss on the repeat (its first token excepted, which
  nothing predicts). Drawn apart from `copy_test.repeat_test`'s rows, which stay unseen."""
  if not 2 <= min_span <= max_span:
    raise ValueError(f"copy spans [{min_span}, {max_span}]: expected 2 <= min_span <= max_span")
  rng = derive_rng(seed, "starter-copy-rows")
  out = []
  for _ in range(count):
    span = rng.integers(FIRST_ORDINARY_ID, vocab_size, int(rng.integers(min_span, max_span + 1)))
    tokens = [int(t) for t in span] * 2
    mask = [0] * (len(span) + 1) + [1] * (len(span) - 1)
    out.append(SFTExample(tokens, mask, "copy", {"span": len(span)}))
  return out


# ------------------------------------------------------------------------------ agent
def oracle_plans(pool, episodes: Sequence[tuple[Hashable, str, int]]) -> dict[Hashable, list]:
  """key -> the oracle_actions() of (key, source, reset seed), read in the sandbox.

  An episode whose reset or oracle call fails is left out (with a warning).
  """
  keys = [("oracle", key) for key, _, _ in episodes]
  resets, answers = [], {}
  for at in range(0, len(episodes), CHUNK):
    chunk = list(zip(keys[at:at + CHUNK], episodes[at:at + CHUNK], strict=True))
    records = pool.reset([(k, source, s) for k, (_, source, s) in chunk])
    live = [k for (k, _), r in zip(chunk, records, strict=True)
            if r.error_kind is None and not r.done]
    answers.update(zip(live, pool.oracle_actions(live), strict=True))
    pool.close_episodes(live)
    resets += records
  plans = {}
  for k, reset in zip(keys, resets, strict=True):
    got = answers.get(k)
    if got is None or got.actions is None or not got.actions:
      why = reset.error_detail if got is None else got.error_detail or "no actions"
      log.warning("no oracle plan for %r: %s", k[1], why)
      continue
    plans[k[1]] = list(got.actions)
  return plans


def corrupt(actions: list[str], attempt: int, rng) -> list[str]:
  """An imperfect plan: a wrong action (one of the plan's with a digit changed, or cut short)
  played before that action, so that the episode goes on after the mistake (attempt 0), or in
  its place (attempt 1); the last attempt drops the last action."""
  if attempt == IMPERFECT_TRIES - 1 and len(actions) > 1:
    return actions[:-1]
  at = int(rng.integers(len(actions)))
  return actions[:at] + [_mistake(actions[at], rng)] + actions[at + (attempt > 0):]


def _mistake(action: str, rng) -> str:
  """The action with one digit changed, or its last word dropped (reversed when one word)."""
  digits = [i for i, ch in enumerate(action) if ch.isdigit()]
  if digits:
    i = digits[int(rng.integers(len(digits)))]
    new = str((int(action[i]) + 1 + int(rng.integers(8))) % 10)
    return action[:i] + new + action[i + 1:]
  words = action.split()
  return " ".join(words[:-1]) if len(words) > 1 else action[::-1] + "?"


def _play(pool, tokenizer, selfplay: SelfPlayConfig, specs: list[EpisodeSpec],
          plans: dict[Hashable, list]) -> list:
  """Plays each spec with its plan as the scripted replies, through the loop's runner."""
  turn: dict[Hashable, int] = {}

  def reply_fn(cid, history, params):
    key = cid[1]
    n = turn.get(key, 0)
    turn[key] = n + 1
    text = replies.format_action(selfplay.action_format, ACTION_LEAD + plans[key][n])
    return tokenizer.encode(text) + [tokenizer.eos_id]

  params = dataclasses.replace(selfplay.agent_sampling, stop_token_ids=tuple(tokenizer.stop_ids))
  engine = FakeEngine(reply_fn, num_slots=CHUNK, steps_per_poll=1 << 20,
                      max_cache_len=selfplay.max_cache_len)
  run = EpisodeSettings(selfplay.action_format, params, selfplay.max_prompt_tokens(params))
  return [ep for at in range(0, len(specs), CHUNK)
          for ep in play_episodes(engine, pool, ChatFormatter(tokenizer), specs[at:at + CHUNK],
                                  run, Timings())]


def _spec(env: VariantEnv, arm: str, kind: str, seed: int, n_actions: int,
          selfplay: SelfPlayConfig, replay: int = 0) -> EpisodeSpec:
  """replay r > 0: the same environment and arm at another reset seed."""
  reset = derive_seed(seed, "starter-reset", kind, env.uid, arm, *([replay] if replay else []))
  return EpisodeSpec((kind, env.uid, arm, replay), env.uid, arm, env.source,
                     env.hint if arm == "hint" else None, reset, 0,
                     max(1, min(selfplay.max_turns, n_actions)))


def _example(ep, env: VariantEnv, kind: str, actions: list) -> SFTExample:
  return SFTExample(list(ep.tokens), list(ep.loss_mask), "agent",
                    {"uid": env.uid, "base": env.base, "category": env.category,
                     "arm": ep.spec.arm, "kind": kind, "return": ep.episode_return,
                     "turns": ep.turns, "reset_seed": ep.spec.seed, "actions": list(actions)})


def agent_examples(envs: Sequence[VariantEnv], tokenizer, selfplay: SelfPlayConfig, pool, *,
                   seed: int = 0, imperfect_share: float = 0.25,
                   resets: int = 1) -> list[SFTExample]:
  """Oracle episodes of every environment in both arms at `resets` reset seeds, plus imperfect
  ones (module doc).

  imperfect_share: imperfect episodes per (environment, arm); each is kept only once its
  sandbox return is below the oracle episodes' (up to IMPERFECT_TRIES corruptions).
  meta["return"] is the episode's return in the sandbox.
  """
  if selfplay.setting != "games":
    raise ValueError(f"agent examples are for the games setting, not {selfplay.setting!r}")
  by_uid = {e.uid: e for e in envs}
  oracle_specs = [_spec(e, arm, "oracle", seed, 0, selfplay, r)
                  for e in envs for arm in ARMS for r in range(resets)]
  plans = oracle_plans(pool, [(s.key, s.source, s.seed) for s in oracle_specs])
  untold = _untold(oracle_specs, plans, by_uid, seed)
  oracle_specs = [dataclasses.replace(s, max_turns=max(1, min(selfplay.max_turns,
                                                              len(plans[s.key]))))
                  for s in oracle_specs if s.key in plans]
  out, best, short = [], {}, []
  for ep in _play(pool, tokenizer, selfplay, oracle_specs, plans):
    if ep.dropped or ep.error_kind is not None:
      continue
    env = by_uid[ep.spec.env_uid]
    if ep.spec.key in untold:  # its return is what the untold plan earns
      out.append(_example(ep, env, "untold", plans[ep.spec.key]))
      continue
    if ep.episode_return < ORACLE_MIN_RETURN:  # e.g. a plan longer than selfplay.max_turns
      short.append(ep.spec.env_uid)
      continue
    pair = (ep.spec.env_uid, ep.spec.arm)
    best[pair] = min(best.get(pair, ep.episode_return), ep.episode_return)
    out.append(_example(ep, env, "oracle", plans[ep.spec.key]))
  if short:
    log.warning("left out %d oracle episodes that fell short of the full return within "
                "selfplay.max_turns=%d: %s", len(short), selfplay.max_turns, short[:8])
  rng = derive_rng(seed, "starter-imperfect")
  chosen = sorted(best)
  picks = rng.choice(len(chosen), size=min(len(chosen), round(imperfect_share * len(chosen))),
                     replace=False)
  todo = [chosen[i] for i in sorted(picks)]
  imperfect = _imperfect(pool, tokenizer, selfplay, by_uid, todo, best, seed)
  return out + imperfect


def _untold(specs: list[EpisodeSpec], plans: dict[Hashable, list], by_uid, seed: int
            ) -> set[Hashable]:
  """Replaces the plans of the episodes an untold agent plays (minigames.untold_plan) in
  `plans`; returns their keys."""
  keys = set()
  for s in specs:
    env = by_uid[s.env_uid]
    rng = random.Random(derive_seed(seed, "starter-untold", *s.key[1:]))
    plan = minigames.untold_plan(env.base, env.source, env.hint, s.arm, rng)
    if plan is not None and s.key in plans:
      plans[s.key] = plan
      keys.add(s.key)
  return keys


def _imperfect(pool, tokenizer, selfplay, by_uid, todo, best, seed) -> list[SFTExample]:
  """Imperfect episodes of (uid, arm) pairs: corrupted oracle plans, kept when worse."""
  out = []
  for attempt in range(IMPERFECT_TRIES):
    if not todo:
      break
    specs = [_spec(by_uid[uid], arm, "imperfect", seed, 0, selfplay) for uid, arm in todo]
    plans = oracle_plans(pool, [(s.key, s.source, s.seed) for s in specs])
    for s in specs:
      if s.key in plans:
        plans[s.key] = corrupt(plans[s.key], attempt, derive_rng(seed, "corrupt", *s.key[1:],
                                                                  attempt))
    specs = [dataclasses.replace(s, max_turns=max(1, min(selfplay.max_turns, len(plans[s.key]))))
             for s in specs if s.key in plans]
    left = []
    for ep in _play(pool, tokenizer, selfplay, specs, plans):
      pair = (ep.spec.env_uid, ep.spec.arm)
      if ep.dropped or ep.error_kind is not None:
        continue
      if ep.episode_return < best[pair]:
        out.append(_example(ep, by_uid[pair[0]], "imperfect", plans[ep.spec.key]))
      else:
        left.append(pair)
    todo = left
  return out
