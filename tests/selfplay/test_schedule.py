"""Refresh windows, pending designs, budget split, settings checks and the chat delta."""

import json

import pytest

from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.designer_rewards import hint_regret
from spade_jax.selfplay.schedule import ActiveEnv, EnvSchedule, PendingDesign, split_budget
from spade_jax.selfplay.seeding import derive_seed
from tests.selfplay.selfplay_fakes import ByteTokenizer, make_settings


def design(refresh, index, uid, k=2):
  return PendingDesign(refresh, refresh + k, index, "c", [1, 2, 3], 1, [-0.1, -0.2], uid)


def test_windows_refresh_every_k_from_step_1():
  c = EnvSchedule(3)
  assert c.is_refresh(5)  # nothing active yet: the first step always refreshes
  c.open_window(1, [], [])
  assert [t for t in range(1, 11) if c.is_refresh(t)] == [1, 4, 7, 10]
  with pytest.raises(ValueError, match="numbered from 1"):
    c.is_refresh(0)


def test_close_window_scores_due_designs_and_keeps_later_ones():
  c = EnvSchedule(2)
  env = ActiveEnv("d1.0", "designed", "c", "src", "hint", None, 1)
  c.open_window(1, [env], [design(1, 0, "d1.0"), design(1, 1, None)])
  env.returns.add_step([0.0, 0.0], [1.0, 0.0])
  env.returns.add_step([0.0, 1.0], [1.0, 1.0])
  assert c.close_window(2, hint_regret) == []  # not due before step 3
  scored = c.close_window(3, hint_regret)
  assert [(s.design.index, s.reward, s.valid) for s in scored] == [(0, 0.75 - 0.25, True),
                                                                   (1, None, False)]
  assert c.pending == [] and c.close_window(3, hint_regret) == []


def test_open_window_rejects_a_wrong_due_step_and_close_a_missing_env():
  c = EnvSchedule(2)
  with pytest.raises(ValueError, match="due at 4"):
    c.open_window(1, [], [design(1, 0, "x", k=3)])
  c.open_window(1, [], [design(1, 0, "gone")])
  with pytest.raises(RuntimeError, match="not in the closing window"):
    c.close_window(3, hint_regret)


def test_schedule_state_round_trip_and_k_mismatch():
  c = EnvSchedule(2)
  env = ActiveEnv("d1.0", "designed", "c", "src", "hint", 4, 1)
  c.open_window(1, [env], [design(1, 0, "d1.0")])
  env.returns.add_step([0.5], [1.0])
  state = json.loads(json.dumps(c.state_dict()))
  back = EnvSchedule(2)
  back.load_state_dict(state)
  assert back.state_dict() == c.state_dict()
  assert back.active[0].returns.no_hint == [[0.5]]
  with pytest.raises(ValueError, match="k=2 but config.selfplay.k=4"):
    EnvSchedule(4).load_state_dict(state)


def test_split_budget_spreads_slots_evenly():
  assert split_budget(24, ["a", "b", "c"]) == ["a"] * 8 + ["b"] * 8 + ["c"] * 8
  assert split_budget(5, ["a", "b"]) == ["a", "a", "a", "b", "b"]


@pytest.mark.parametrize("overrides, message", [
    (dict(k=0), "selfplay.k=0"), (dict(group_size=1), "selfplay.group_size=1"),
    (dict(categories_per_step=3), "categories_per_step=3"),
    (dict(action_format="<action></action>"), "exactly one"),
    (dict(designer_reward="regret"), "designer_reward='regret'"),
    (dict(setting="chess"), "config.setting='chess'"),
    (dict(skills=()), r"config.selfplay.skills=\(\): expected a non-empty"),
    (dict(library="probe"), r"^config.selfplay.library='probe': expected one of "
     r"\('seeds', 'vowels'(, '\w+')*\) \(renamed: use 'vowels'\)$"),
])
def test_bad_settings_fail_with_the_field_name(overrides, message):
  with pytest.raises(ValueError, match=message):
    make_settings(**overrides)


def test_turn_delta_skips_an_end_of_turn_token_the_reply_already_has():
  tok = ByteTokenizer()
  fmt = ChatFormatter(tok)
  obs = [{"role": "user", "content": "obs"}]
  assert fmt.turn_text(obs) == "<|im_end|>\n<|im_start|>user\nobs<|im_end|>\n" \
                               "<|im_start|>assistant\n"
  full = tok.encode(fmt.turn_text(obs))
  assert fmt.turn_ids(obs, [40, tok.eos_id]) == full[1:]
  assert fmt.turn_ids(obs, [40, 41]) == full  # cut reply: the template closes the turn
  tools = fmt.turn_text([{"role": "tool", "content": "42"}, {"role": "tool", "content": "7"}])
  assert tools == ("<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n"
                   "<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_derived_seeds_are_stable_and_distinct():
  assert derive_seed(0, "reset", 3, "d1.0", "hint", 1) == derive_seed(0, "reset", 3, "d1.0",
                                                                         "hint", 1)
  seeds = {derive_seed(0, "reset", 3, "e", arm, g) for arm in ("a", "b") for g in range(50)}
  assert len(seeds) == 100 and all(0 <= s < 2**31 for s in seeds)


def test_settings_read_the_experiment_config():
  from spade_jax import config_schema
  config = config_schema.base_config()
  s = config_schema.validate(config).selfplay  # the cache length derived from config.engine
  assert (s.num_envs, s.k, s.group_size) == (24, 4, 8)
  assert s.skills == tuple(config.selfplay.skills)
  assert s.designer_sampling.max_new_tokens == config.sampling.designer["max_new_tokens"]
  assert s.max_prompt_tokens(s.designer_sampling) == (
      config.engine.max_cache_len - config.sampling.designer["max_new_tokens"])
  assert s.invalid_designer_reward == -1.0 and not s.train_agent_on_hint_arm
