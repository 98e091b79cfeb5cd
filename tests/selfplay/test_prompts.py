"""Designer and agent prompts: what each role is shown."""

from spade_jax.sandbox import contract, validate
from spade_jax.sandbox.contract import CONTRACT_TEXT
from spade_jax.selfplay import prompts


def test_designer_prompt_quotes_contract_scaffold_grounding_and_memory():
  memory = [prompts.MemoryView("planning", "class A:\n  pass\n" + "#" * 3000, "plan ahead",
                               0.25, 0.75, 0.5),
            prompts.MemoryView("planning", "class B:\n  pass\n", "go left", None, None, None)]
  system, user = prompts.designer_messages("planning", "Ohm's law: V = I R.", memory)
  assert system["role"] == "system" and CONTRACT_TEXT.rstrip() in system["content"]
  assert prompts.SCAFFOLD in system["content"] and "<hint>" in system["content"]
  assert "hint-based regret" in system["content"]
  text = user["content"]
  assert "<passage>\nOhm's law: V = I R.\n</passage>" in text
  assert "Target skill category: planning" in text
  assert "win rate without hint 0.25, with hint 0.75, regret 0.50" in text
  assert "unmeasured" in text and "<hint>go left</hint>" in text
  assert "# ... (cut)" in text and len(text) < 2 * prompts.MEMORY_SOURCE_CHARS + 1500


def test_ablations_and_variants_change_the_prompt():
  bare = prompts.designer_user_message("spatial", None, ())
  assert "<passage>" not in bare and "Environments already" not in bare
  tools = prompts.designer_system_prompt("tool_use")
  assert prompts.SCAFFOLD_TOOLS in tools and "tool-use environment" in tools
  for scaffold in (prompts.SCAFFOLD, prompts.SCAFFOLD_TOOLS):  # the contract's shape, oracle
    assert validate.static_check(scaffold).valid and "def oracle_actions(self)" in scaffold
  assert "isinstance(action, str)" in prompts.SCAFFOLD_TOOLS  # calls arrive as dicts
  prefix = contract.INSTRUCTION_PREFIX  # the user instructions the `instructions` guard counts
  assert f'"{prefix}"' in tools and f'return "{prefix} <the user' in prompts.SCAFFOLD_TOOLS
  ema = prompts.designer_system_prompt("games", "ema_learning_potential")
  assert "learning potential" in ema and "hint-based regret" not in ema


def test_agent_prompt_states_the_action_format_and_only_the_hint_arm_sees_the_hint():
  plain = prompts.agent_system_prompt("<action>{}</action>")
  hinted = prompts.agent_system_prompt("<action>{}</action>", hint="sort first")
  assert "<action>YOUR ACTION</action>" in plain and "sort first" not in plain
  assert hinted.startswith(plain) and hinted.endswith("sort first")
  tools = prompts.agent_system_prompt("<action>{}</action>", tools=True)
  assert "several tools in one reply" in tools and "<action>" not in tools


def test_the_prompt_names_the_passage_origin():
  text = prompts.designer_user_message("induction", "Totients count coprimes.", (),
                                       "the documentation of sympy.ntheory")
  assert "a passage from the documentation of sympy.ntheory." in text
  assert "math and science corpus" not in prompts.designer_user_message("induction", "x", ())


def test_the_compact_designer_prompt_keeps_role_format_and_request_but_not_the_contract():
  full, user = prompts.designer_messages("planning", "Ohm's law.", (), style="full")
  compact, same_user = prompts.designer_messages("planning", "Ohm's law.", (), style="compact")
  assert same_user == user  # passage, memory and category are the same request
  assert CONTRACT_TEXT.rstrip() not in compact["content"]
  assert prompts.SCAFFOLD not in compact["content"]
  assert "<hint>" in compact["content"] and "oracle_actions()" in compact["content"]
  assert len(compact["content"]) < len(full["content"]) // 5
  tools = prompts.designer_system_prompt("tool_use", style="compact")
  assert "tool-use environment" in tools and CONTRACT_TEXT.rstrip() not in tools
  try:
    prompts.designer_system_prompt("games", style="short")
  except ValueError as err:
    assert "designer prompt 'short'" in str(err)
  else:
    raise AssertionError("an unknown prompt style was accepted")


def test_the_prompt_style_is_a_checked_setting():
  import pytest

  from spade_jax.checks import ConfigError
  from spade_jax.selfplay.config import SelfPlayConfig

  assert SelfPlayConfig(designer_prompt="compact").designer_prompt == "compact"
  with pytest.raises(ConfigError, match="selfplay.designer_prompt='short'"):
    SelfPlayConfig(designer_prompt="short")
