"""The loop's designer and curriculum signals (issue 26): designer rows by
`designer_advantage`, the last window trained at the last step, the designer's behaviour-policy
age, and unplayable hinted episodes left out of the regret. Same scripted policies as
test_loop.py: slot 0 writes a valid environment, slot 1 prose; the hint arm always wins."""

import pytest

from spade_jax.engine.api import SamplingParams
from spade_jax.selfplay import prompts
from spade_jax.selfplay.chat import ChatFormatter
from tests.selfplay.test_loop import TOK, HintArmInfraFailures, designer_rows, make_loop, run


def test_discard_trains_only_the_valid_design():
  loop, _ = make_loop(designer_advantage="discard")
  records = run(loop, 3)
  assert records[2].designer_samples == 1 and records[2].designer_rewards == [0.5]
  assert records[2].designer_regrets == [0.5]
  batch = loop.trainer.batches[2]
  assert batch.rewards[designer_rows(batch)].tolist() == [0.5]


def test_two_level_rows_carry_the_validity_term():
  loop, _ = make_loop(designer_advantage="two_level", validity_weight=0.5)
  run(loop, 3)
  batch = loop.trainer.batches[2]
  rows = designer_rows(batch)
  assert batch.rewards[rows].tolist() == [0.5, -1.0]
  # z([1, 0]) = [1, -1] (to 1e-6), times the weight; the two rows sit in different groups.
  assert batch.advantage_offsets[rows].tolist() == pytest.approx([0.5, -0.5], abs=1e-5)
  assert len(set(batch.group_ids[rows].tolist())) == 2
  assert not batch.advantage_offsets[[i for i in range(batch.num_rows) if i not in rows]].any()


def test_the_last_step_trains_the_last_refresh_and_reports_the_behaviour_age():
  loop, _ = make_loop(designer_advantage="discard")
  records = run(loop, 3)  # k = 2: refresh 1's design is trained at step 3, 2 updates old
  assert records[2].train_metrics["designer/behaviour_age"] == 2.0
  last = loop.step(final=True)  # step 4: refresh 3's design is due at 5, which never comes
  assert last.designer_samples == 1 and loop.schedule.pending == []
  assert last.designer_rewards == [1.0]  # regret over steps 3 and 4: 1 - 0
  assert last.train_metrics["designer/behaviour_age"] == 1.0
  assert loop.state_dict()["updates"] == 4


class HintResetFails(HintArmInfraFailures):
  """Every hint-arm reset fails as the environment's own error (not infrastructure)."""

  kind = "exception"


def _prompt_len(hint):
  messages = prompts.agent_messages("[env A] instance 1000000000. Say win.",
                                    "<action>{}</action>", hint, tools=False)
  return len(ChatFormatter(TOK).prompt_ids(messages))


@pytest.mark.parametrize("case", ["prompt_too_long", "reset_failed"])
def test_unplayable_hinted_episodes_give_no_regret_not_a_negative_one(case):
  overrides = {"designer_advantage": "discard"}
  if case == "prompt_too_long":  # the hint makes the first prompt one the cache cannot take
    assert _prompt_len("say win") > _prompt_len(None) + 10
    # The designer's prompt (~7k byte tokens) fits 12000 - 4000; the agent's hinted one does
    # not fit what its reply cap leaves.
    overrides.update(max_cache_len=12000, agent_sampling=SamplingParams(
        max_new_tokens=12000 - _prompt_len(None) - 5))
  else:
    overrides["pool"] = HintResetFails()
  loop, _ = make_loop(**overrides)
  records = run(loop, 3)
  env = records[0].envs[0]
  assert env.win_rate["hint"] is None and env.regret is None and env.returns["hint"] == []
  assert env.win_rate["no_hint"] == 0.0 and env.dropped_episodes == 0
  assert records[0].envs_without_regret == 1 and records[0].unplayable_episodes == 2
  assert records[0].episode_errors == {
      "prompt_too_long" if case == "prompt_too_long" else "exception": 2}
  # The design has no regret: not trained (scored 0 - 0.5 it would be pushed down).
  assert records[2].designs_without_regret == 1 and records[2].designer_samples == 0
  assert loop.memory.get("d1.0").regret is None
