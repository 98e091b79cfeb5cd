"""The self-play loop with scripted designer and agent policies: exact bookkeeping.

Designer slot 0 writes environment A (valid), slot 1 writes prose (invalid). The agent
always wins with the hint; without it, it wins only at step 2. Steps count from 1; with
k = 2 the windows are {1, 2}, {3, 4}, {5, 6}: window 1's no-hint mean is 0.5 (regret 0.5),
later windows' is 0 (regret 1.0), and each window's designer samples are trained exactly
k steps later.
"""

import dataclasses
import importlib.util
import json

import pytest

from spade_jax import config_schema
from spade_jax.checks import ConfigError
from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.envs.library import load_seed_library
from spade_jax.rl.batch import AGENT, DESIGNER
from spade_jax.sandbox.api import EnvStep
from spade_jax.sandbox.fake import FakePool
from spade_jax.selfplay.config import SelfPlayConfig
from spade_jax.selfplay.loop import SelfPlayLoop
from spade_jax.selfplay.memory import MemoryEntry
from spade_jax.selfplay.record import ARMS
from tests.selfplay.selfplay_fakes import (
  REPLY_LOGPROB,
  ByteTokenizer,
  FakeTrainer,
  ListCorpus,
  ScriptedPolicy,
  designer_reply,
  make_engine,
  make_settings,
  seed_library,
)

TOK = ByteTokenizer()
DESIGNS = {0: designer_reply("A"), 1: "I would rather not write code."}


def wins_with_hint_or_at_step_2(tag, hinted, step, turn):
  return "<action>win</action>" if hinted or step == 2 else "<action>lose</action>"


def make_loop(designs=DESIGNS, rule=wins_with_hint_or_at_step_2, pool=None, **overrides):
  # The bookkeeping below follows the invalid design's row too: "penalty" keeps one (the
  # default "discard" and "two_level" are tested in test_designer_advantage.py).
  overrides.setdefault("designer_advantage", "penalty")
  policy = ScriptedPolicy(TOK, designs, rule)
  loop = SelfPlayLoop(make_settings(**overrides), engine=make_engine(policy),
                      pool=pool or FakePool(),
                      tokenizer=TOK, trainer=FakeTrainer(), corpus=ListCorpus(),
                      seed_envs=seed_library())
  return loop, policy


def run(loop, n):
  return [loop.step() for _ in range(n)]


def designer_rows(batch):
  return [i for i, r in enumerate(batch.roles) if r == DESIGNER]


def test_refresh_every_k_and_designer_update_delayed_by_k():
  loop, policy = make_loop()
  records = run(loop, 5)
  assert [r.step for r in records] == [1, 2, 3, 4, 5]
  assert sorted({c[1] for c in policy.designer_calls}) == [1, 3, 5]
  assert [r.refreshed for r in records] == [True, False, True, False, True]
  assert [r.designer_requests for r in records] == [2, 0, 2, 0, 2]
  assert [r.designer_valid for r in records] == [1, 0, 1, 0, 1]
  assert records[0].designer_invalid_reasons == {"parse/no_code_block": 1}
  assert [[e.uid for e in r.envs] for r in records] == [["d1.0"], ["d1.0"], ["d3.0"],
                                                        ["d3.0"], ["d5.0"]]
  assert [r.designed_envs for r in records] == [1] * 5
  # Per-step play: G = 2 episodes per arm, the hint arm always wins.
  assert [r.envs[0].win_rate["no_hint"] for r in records] == [0.0, 1.0, 0.0, 0.0, 0.0]
  assert all(r.envs[0].win_rate["hint"] == 1.0 for r in records)
  assert [r.envs[0].regret for r in records] == [1.0, 0.0, 1.0, 1.0, 1.0]
  # Delay: designer samples of refresh t are trained at step t + k with the window's regret.
  assert [r.designer_samples for r in records] == [0, 0, 2, 0, 2]
  assert records[2].designer_rewards == [0.5, -1.0]  # window {1,2}: 1 - (0+1)/2; invalid
  assert records[4].designer_rewards == [1.0, -1.0]  # window {3,4}
  batches = loop.trainer.batches
  assert len(batches) == 5 and loop.engine.num_weight_loads == 5
  assert [len(designer_rows(b)) for b in batches] == [0, 0, 2, 0, 2]
  b2 = batches[2]
  rows = designer_rows(b2)
  assert b2.rewards[rows].tolist() == [0.5, -1.0]
  assert len(set(b2.group_ids[rows].tolist())) == 1  # one group per refresh
  # Agent rows: only the no-hint arm by default, one group per env and arm.
  agent = [i for i, r in enumerate(b2.roles) if r == AGENT]
  assert len(agent) == 2 and len(set(b2.group_ids[agent].tolist())) == 1
  assert set(b2.group_ids[agent].tolist()).isdisjoint(b2.group_ids[rows].tolist())


def test_designer_rows_mask_exactly_the_sampled_output():
  loop, _ = make_loop()
  run(loop, 3)
  batch = loop.trainer.batches[2]
  row = designer_rows(batch)[0]
  mask = batch.loss_mask[row] > 0
  out = batch.tokens[row][mask].tolist()
  assert out == TOK.encode(DESIGNS[0]) + [TOK.eos_id]
  assert (batch.behaviour_logprobs[row][mask] == REPLY_LOGPROB).all()
  n = int(batch.attention_mask[row].sum())
  assert mask[:n].tolist() == [False] * (n - len(out)) + [True] * len(out)
  prompt = TOK.decode(batch.tokens[row][:n - len(out)].tolist())
  assert "ENVIRONMENT CONTRACT" in prompt and "<passage>" in prompt
  assert "Target skill category: s" in prompt


def test_memory_holds_window_statistics():
  loop, _ = make_loop()
  records = run(loop, 2)
  entry = loop.memory.get("d1.0")
  assert (entry.win_rate_no_hint, entry.win_rate_hint, entry.regret) == (0.5, 1.0, 0.5)
  # times_played counts windows (one here, played at steps 1 and 2), not steps.
  assert entry.step == 2 and entry.times_played == 1 and entry.origin == "designed"
  assert entry.source.startswith("import random") and entry.hint == "say win"
  assert records[-1].memory_size == 3  # two seeds + d1.0


def test_resume_from_state_dict_continues_exactly():
  straight, _ = make_loop(fill_from_memory=True)
  expected = run(straight, 5)
  first, _ = make_loop(fill_from_memory=True)
  run(first, 3)
  state = json.loads(json.dumps(first.state_dict()))
  assert state["steps_done"] == 3 and len(state["curriculum"]["pending"]) == 2
  resumed, policy = make_loop(fill_from_memory=True)
  resumed.load_state_dict(state)
  got = run(resumed, 2)  # step 4 mid-window, step 5 refreshes and trains refresh 3's designs
  assert [r.step for r in got] == [4, 5] and {c[1] for c in policy.designer_calls} == {5}
  strip = lambda r: {**r.to_dict(), "timings": None}
  assert [strip(r) for r in got] == [strip(r) for r in expected[3:]]
  older, _ = make_loop(fill_from_memory=True)  # a checkpoint that names the count "step"
  older.load_state_dict({("step" if k == "steps_done" else k): v for k, v in state.items()})
  assert older.steps_done == 3 and run(older, 1)[0].step == 4
  assert resumed.state_dict() == straight.state_dict()
  for a, b in zip(resumed.trainer.batches, straight.trainer.batches[3:], strict=True):
    assert (a.tokens == b.tokens).all() and (a.rewards == b.rewards).all()


def test_fill_from_memory_replays_seeds_without_designer_reward():
  loop, _ = make_loop(designs={}, fill_from_memory=True)
  records = run(loop, 3)
  assert [(r.designed_envs, r.replayed_envs) for r in records] == [(0, 2)] * 3
  assert {e.uid for e in records[0].envs} == {"seed/S1", "seed/S2"}
  assert all(e.origin == "replayed" for e in records[0].envs)
  assert records[2].designer_rewards == [-1.0, -1.0]  # only the invalid outputs
  assert loop.memory.get("seed/S1").times_played == 2  # windows {1, 2} and {3}, not steps


def test_no_valid_env_and_no_fill_plays_nothing():
  loop, _ = make_loop(designs={})
  records = run(loop, 3)
  assert [len(r.envs) for r in records] == [0, 0, 0]
  assert [r.agent_samples for r in records] == [0, 0, 0]
  assert [r.designer_samples for r in records] == [0, 0, 2]
  assert len(loop.trainer.batches) == 1  # steps without any sample skip the update


def test_fixed_envs_play_the_seed_library_without_designer():
  loop, policy = make_loop(fixed_envs="grpo")
  records = run(loop, 3)
  assert not policy.designer_calls
  # No hint arm: regret is not needed without a designer.
  assert all(not e.returns["hint"] and len(e.returns["no_hint"]) == 2
             for r in records for e in r.envs)
  assert [sorted(e.uid for e in r.envs) for r in records] == [["seed/S1", "seed/S2"]] * 3
  assert all(e.origin == "fixed" for r in records for e in r.envs)
  assert [r.replayed_envs for r in records] == [2, 2, 2]
  assert all(r.designer_samples == 0 for r in records)


def test_fixed_envs_play_num_envs_a_step_or_refuse_a_smaller_library():
  loop, _ = make_loop(fixed_envs="grpo", num_envs=1)
  assert [len(r.envs) for r in run(loop, 3)] == [1, 1, 1]
  with pytest.raises(ConfigError, match=r"^config.selfplay.num_envs=3: expected <= 2, the "
                     r"library environments of the skills \('s1', 's2'\)"):
    make_loop(fixed_envs="grpo", num_envs=3)


def test_frozen_designer_generates_but_never_trains():
  loop, policy = make_loop(train_designer=False)
  records = run(loop, 5)
  assert sorted({c[1] for c in policy.designer_calls}) == [1, 3, 5]
  assert all(r.designer_samples == 0 for r in records)
  assert all(not designer_rows(b) for b in loop.trainer.batches)


@pytest.mark.parametrize("flag, absent", [("use_corpus", "<passage>"),
                                          ("use_memory", "Environments already in")])
def test_corpus_and_memory_ablations_remove_their_prompt_part(flag, absent):
  prompts = {}
  for value in (True, False):
    loop, _ = make_loop(**{flag: value})
    run(loop, 3)
    b = loop.trainer.batches[2]
    row = designer_rows(b)[0]
    prompts[value] = TOK.decode(b.tokens[row][b.loss_mask[row] == 0].tolist())
  assert absent in prompts[True] and absent not in prompts[False]


def test_hint_arm_trains_the_agent_when_asked_and_ema_reward_switch():
  loop, _ = make_loop(train_agent_on_hint_arm=True, designer_reward="ema_learning_potential")
  records = run(loop, 3)
  assert records[0].agent_samples == 4
  assert records[2].designer_rewards == [1.0, -1.0]  # 4 m (1 - m), m = 0.5 * 0 + 0.5 * 1


class HintArmInfraFailures(FakePool):
  """Every reset of a hint-arm episode fails with an infrastructure error (`kind`)."""

  kind = "infra"

  def reset(self, episodes):
    ok = [e for e in episodes if e[0][2:3] != ("hint",)]  # validation's ids are shorter
    records = dict(zip([e[0] for e in ok], super().reset(ok), strict=True))
    return [records.get(e[0]) or EnvStep("", error_kind=self.kind, error_detail="no worker")
            for e in episodes]


class ResetSeeds(FakePool):
  """Records the reset seed of every agent episode by its key (step, env, arm, index)."""

  def __init__(self):
    super().__init__()
    self.seeds = {}

  def reset(self, episodes):
    self.seeds.update({key: seed for key, _, seed in episodes
                       if len(key) == 4 and key[2] in ARMS})  # not validation's resets
    return super().reset(episodes)


def test_the_two_arms_of_an_environment_reset_with_the_same_seeds():
  pool = ResetSeeds()
  loop, _ = make_loop(pool=pool)
  run(loop, 2)
  plays = {(t, uid, g) for t, uid, _, g in pool.seeds}
  assert len(plays) == 2 * 2 and len(pool.seeds) == 2 * len(plays)  # 2 steps x G = 2, 2 arms
  for t, uid, g in plays:
    assert pool.seeds[(t, uid, "no_hint", g)] == pool.seeds[(t, uid, "hint", g)]
  assert len(set(pool.seeds.values())) == len(plays)  # new instances each episode and step


def test_infra_failures_are_dropped_not_scored():
  loop, _ = make_loop(pool=HintArmInfraFailures())
  records = run(loop, 3)
  env = records[0].envs[0]
  assert env.win_rate == {"no_hint": 0.0, "hint": None} and env.regret is None
  assert env.dropped_episodes == 2 and records[0].dropped_episodes == 2
  assert env.returns["hint"] == [] and env.transcript["hint"] == ""
  # The designed environment has no hint-arm measurement: its designer sample is not
  # trained (never scored as 0); only the invalid output's sample is.
  assert records[2].designer_rewards == [-1.0] and records[2].designer_samples == 1
  assert loop.memory.get("d1.0").regret is None


DOORS = '''\
import json
import random


class Doors:
  max_turns = 3
  tools = [{"type": "function", "function": {"name": "look", "description": "List the doors.",
            "parameters": {"type": "object", "properties": {}}}},
           {"type": "function", "function": {"name": "open_door", "description": "Open one.",
            "parameters": {"type": "object", "properties": {
                "door": {"type": "string", "enum": ["red", "blue", "green"]}},
                "required": ["door"]}}}]

  def reset(self, seed=None):
    self.n = random.Random(seed).randint(0, 10**9)
    return f"[env T] instance {self.n}.\\nUser: Look at the doors.", {}

  def step(self, action):
    if isinstance(action, str):
      return "Please use the tools.", 0.0, False, False, {}
    if action["name"] == "look":
      doors = json.dumps({"doors": ["red", "blue", "green"], "n": self.n})
      return f"{doors}\\nUser: Now open the door with the prize.", 0.0, False, False, {}
    won = action["arguments"]["door"] == "red"
    return json.dumps({"prize": won}), float(won), True, False, {}

  def oracle_actions(self):
    return [{"name": "look", "arguments": {}}, {"name": "open_door", "arguments": {"door": "red"}}]
'''


def test_tool_use_setting_end_to_end_with_qwen3_replies():
  draft = "<think>\nA draft:\n```python\nclass Draft:\n  pass\n```\n</think>\n\n"
  designs = {0: f"{draft}```python\n{DOORS}```\n<hint>open the red door</hint>",
             1: "I would rather not write code."}

  def agent(tag, hinted, step, turn):
    door = "red" if hinted else "blue"
    return ("<think>\nLook first, then open a door.\n</think>\n\n"
            '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>\n'
            f'<tool_call>\n{{"name": "open_door", "arguments": {{"door": "{door}"}}}}\n'
            "</tool_call>")

  pool = FakePool(require_tools=True, require_oracle=True)
  loop, _ = make_loop(designs=designs, rule=agent, pool=pool, setting="tool_use",
                      agent_sampling=SamplingParams(max_new_tokens=512))
  (record,) = run(loop, 1)
  assert record.designer_valid == 1 and record.designer_invalid_reasons == {
      "parse/no_code_block": 1}
  (env,) = [e for e in record.envs if e.origin == "designed"]
  assert env.win_rate == {"no_hint": 0.0, "hint": 1.0} and env.regret == 1.0
  assert env.step_rewards["hint"] == [0.0, 1.0, 0.0, 1.0]  # two tool turns per episode
  assert "<tool_response>" not in env.transcript["hint"]  # the transcript is per message
  assert '[tool]\n{"prize": true}' in env.transcript["hint"]
  batch = loop.trainer.batches[-1]
  assert (batch.roles == AGENT).sum() == 2  # the no-hint arm of the designed environment
  assert env.first_observation.startswith("[env T] instance")


def test_shipped_tool_use_config_plays_the_tool_seeds_on_the_fakes():
  spec = importlib.util.spec_from_file_location("tool_use_config",
                                                config_schema.CONFIG_DIR / "tool_use.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  settings = dataclasses.replace(SelfPlayConfig.from_config(module.get_config()), num_envs=2,
                                 group_size=2, fixed_envs="grpo", max_cache_len=None)
  library = [MemoryEntry(f"seed/{s.name}", s.source, s.hint, s.category, "seed", -1)
             for s in load_seed_library(kind="tool_use")]

  def first_tool_then_answer(cid, history, params):  # a Qwen3 reply: think, then one call
    convo = TOK.decode(history)
    tool = json.loads(convo.split("<tools>\n", 1)[1].split("\n", 1)[0])["function"]["name"]
    turn = convo.count("<|im_start|>assistant") - 1
    text = ("<think>\nStart with a tool.\n</think>\n\n"
            f'<tool_call>\n{{"name": "{tool}", "arguments": {{}}}}\n</tool_call>'
            if turn == 0 else "<think>\nDone.\n</think>\n\nAll done.")
    ids = TOK.encode(text) + [TOK.eos_id]
    return ids, [REPLY_LOGPROB] * len(ids)

  loop = SelfPlayLoop(settings, engine=FakeEngine(first_tool_then_answer, num_slots=8,
                                                  steps_per_poll=256),
                      pool=FakePool(require_tools=True), tokenizer=TOK, trainer=FakeTrainer(),
                      corpus=None, seed_envs=library)
  record = loop.step()
  assert len(record.envs) == 2 and record.dropped_episodes == 0
  for env in record.envs:
    assert "[tool]\n" in env.transcript["no_hint"] and "All done." in env.transcript["no_hint"]
    assert len(env.step_rewards["no_hint"]) >= 2  # a tool turn, then a reply
    assert not env.step_rewards["hint"]  # the fixed-env baseline plays no hint arm
  assert loop.trainer.batches and (loop.trainer.batches[-1].roles == AGENT).all()
