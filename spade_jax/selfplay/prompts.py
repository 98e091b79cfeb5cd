"""System prompts and user messages of the two roles the shared policy plays.

The designer sees its role and reward, the environment contract quoted verbatim from
`spade_jax.sandbox.contract`, a scaffold, a corpus passage, a sample of the environment
memory and the skill category to target; it answers with one python block and a
`<hint>`. The agent sees its role, the action format (in the tool-use setting the chat
template's own tool-call instructions, see `replies.py`) and, in the hint arm, the hint;
observations arrive as user turns (tool results as tool turns in the tool-use setting).
All messages are plain {"role", "content"} dicts for `Tokenizer.apply_chat_template`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from spade_jax.sandbox.contract import CONTRACT_TEXT
from spade_jax.selfplay.replies import action_format_example

SETTINGS = ("games", "tool_use")
# "full": role, reward, contract, scaffold and output format; "compact": role and output format
# only, for a small model that learned the contract from examples (proj/starter's policy, whose
# memory sample shows a whole environment; the regret test's designer) and whose training pays
# for every prompt token.
DESIGNER_PROMPTS = ("full", "compact")
MEMORY_SOURCE_CHARS = 1500  # each memory entry's source is cut to this in the designer prompt

_DESIGNER_ROLE = """\
You are the Environment Designer of a self-play curriculum. You write a new training
environment for a reasoning agent: a complete, executable Python program with the
reset()/step() interface of the contract below, plus a privileged hint.

The agent (the same model as you, in another role) plays your environment several times
without the hint and several times with it. {reward}
Code that breaks the contract earns the lowest reward.

Good environments: procedurally generated from the seed (many different instances), with
several turns of interaction where information is revealed by the agent's actions, partial
rewards for measurable progress, a first observation that states the task, the rules and the
exact action syntax but NOT the method that solves it, and clear feedback on malformed actions.
Also write oracle_actions(): the actions that solve the current instance, computed from your
hidden state; the validator plays them and requires a full return, and it rejects
environments that a degenerate player (empty replies, the example action, or one reply that
lists many candidate answers) wins."""

REWARD_TEXT = {
    "hint_regret": """You are rewarded by the hint-based regret: its mean return
with the hint minus its mean return without. Aim for the agent's learning frontier:
environments it cannot yet solve alone but can solve when it knows the hint. Too easy
(solved without the hint) or impossible (unsolved even with it) earns nothing.""",
    "ema_learning_potential": """You are rewarded by its learning potential: highest
when the agent solves your environment about half of the time without the hint, nothing
when it always or never does. Aim for the agent's learning frontier.""",
}

_DESIGNER_ROLE_TOOLS = """\
This is a tool-use environment: define the class attribute `tools` (OpenAI function-calling
specs), keep a stateful backend in the instance (records, accounts, files, ...), pose a
sequence of at least two user instructions, each on an observation line that starts with
"User:" (the first in reset's observation, the next once the previous one is done), and
reward correct tool calls and final states. A tool call reaches step() already parsed, as
a dict {"name": "<tool>", "arguments": {...}}; a str is the agent's plain reply to the user.
The validator calls every declared tool with arguments that match its JSON schema: answer
each call with a tool result (an error message for bad values), never crash, and never
answer a tool call as if it were chat. oracle_actions() returns the calls (dicts) and replies
(strs) that complete every instruction. The hint is a step-by-step plan: which tools to
call, in which order, with which arguments."""

_COMPACT_ROLE = """\
You are the Environment Designer of a self-play curriculum. Write a new training environment
for a reasoning agent: one Python class with reset(seed) and step(action) that keeps the
contract of the environments shown to you, with oracle_actions(), plus a privileged hint."""

_OUTPUT_FORMAT = """\
Answer with exactly one ```python code block that holds the whole environment (one class),
followed by the hint inside <hint>...</hint>. The hint is short, specific and actionable: the
strategy or key insight a player needs, not the answer to one instance."""

SCAFFOLD = '''\
import random


class GeneratedEnv:
  """<one line: what the task is>"""

  max_turns = 8

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.turns = 0
    # Draw this episode's hidden instance from self.rng.
    return "<task, rules and the exact action syntax>", {}

  def step(self, action):
    self.turns += 1
    # Parse the action; explain the expected format when it is malformed (reward 0.0).
    # Give partial rewards for progress; the rewards of one episode sum to at most 1.
    return "<feedback>", 0.0, False, False, {}

  def oracle_actions(self):
    # The actions that solve this instance, computed from the hidden state.
    return ["<action>"]
'''

SCAFFOLD_TOOLS = '''\
import json
import random


class GeneratedToolEnv:
  """<one line: what the user wants done>"""

  max_turns = 10
  tools = [{"type": "function", "function": {
      "name": "<tool_name>", "description": "<what it does>",
      "parameters": {"type": "object", "properties": {"<arg>": {"type": "string"}},
                     "required": ["<arg>"]}}}]

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    # Build the backend state and the user's instructions (two or more) from self.rng.
    return "User: <the user's first instruction>", {}

  def step(self, action):
    if isinstance(action, str):
      return "<reply to the user's plain message>", 0.0, False, False, {}
    # action is {"name": ..., "arguments": {...}}: run the tool on the backend.
    result = {"error": f"unknown tool {action['name']}"}
    # Reward correct calls and final states; the rewards of one episode sum to at most 1.
    # Once an instruction is done, add the line "User: <the next instruction>" to the result.
    return json.dumps(result), 0.0, False, False, {}

  def oracle_actions(self):
    # The calls and replies that complete every instruction, from the hidden state.
    return [{"name": "<tool_name>", "arguments": {"<arg>": "<value>"}}, "<final reply>"]
'''

_AGENT_ROLE = """\
You are a reasoning agent playing a text environment over several turns. Each user message
is the environment's observation. Think as much as you need, then end every reply with exactly
one action written as {action}; only the text inside is sent to the environment."""

_AGENT_ROLE_TOOLS = """\
You are an assistant that completes the user's requests by calling the tools you are given,
in the tool-call format described below. You may call several tools in one reply; each
result comes back as a tool response, in order. Reply in plain text, without a tool call,
when the request is done or when you need to tell the user something."""


@dataclasses.dataclass(frozen=True)
class MemoryView:
  """The part of a memory entry the designer is shown."""

  category: str
  source: str
  hint: str
  win_rate_no_hint: float | None
  win_rate_hint: float | None
  regret: float | None


def _check_setting(setting: str) -> None:
  if setting not in SETTINGS:
    raise ValueError(f"config.setting={setting!r}; expected one of {SETTINGS}")


def designer_system_prompt(setting: str = "games", reward: str = "hint_regret",
                           style: str = "full") -> str:
  """Role, reward, contract, scaffold and output format of the designer (DESIGNER_PROMPTS)."""
  _check_setting(setting)
  if reward not in REWARD_TEXT:
    raise ValueError(f"no designer prompt text for the reward {reward!r}; known: "
                     f"{sorted(REWARD_TEXT)}")
  if style not in DESIGNER_PROMPTS:
    raise ValueError(f"designer prompt {style!r}; expected one of {DESIGNER_PROMPTS}")
  tools = setting == "tool_use"
  if style == "compact":
    return "\n\n".join([_COMPACT_ROLE, *([_DESIGNER_ROLE_TOOLS] if tools else []),
                         _OUTPUT_FORMAT])
  parts = [_DESIGNER_ROLE.format(reward=REWARD_TEXT[reward])]
  if tools:
    parts.append(_DESIGNER_ROLE_TOOLS)
  parts += [CONTRACT_TEXT.rstrip(), "SCAFFOLD (rename the class, fill in every placeholder):\n"
            f"```python\n{SCAFFOLD_TOOLS if tools else SCAFFOLD}```", _OUTPUT_FORMAT]
  return "\n\n".join(parts)


def _rate(x: float | None) -> str:
  return "unmeasured" if x is None else f"{x:.2f}"


def format_memory_entry(i: int, entry: MemoryView, max_chars: int = MEMORY_SOURCE_CHARS) -> str:
  source = entry.source if len(entry.source) <= max_chars else (
      entry.source[:max_chars] + "\n# ... (cut)")
  return (f"Environment {i} (category {entry.category}; agent win rate without hint "
          f"{_rate(entry.win_rate_no_hint)}, with hint {_rate(entry.win_rate_hint)}, "
          f"regret {_rate(entry.regret)}):\n```python\n{source.rstrip()}\n```\n"
          f"<hint>{entry.hint}</hint>")


def designer_user_message(category: str, passage: str | None,
                          memory: Sequence[MemoryView] = (), origin: str | None = None) -> str:
  """The designer's request: skill category, optional corpus passage and memory sample.

  `origin` says where the passage comes from (the corpus' own `Passage.origin`, e.g. "the
  documentation of sympy.physics.optics"), so the prompt never misnames the corpus.
  """
  parts = []
  if passage:
    parts.append(f"Here is a passage from {origin or 'the corpus'}. Use an idea from it (a "
                 "concept, a law, a procedure) as the core of your environment:\n"
                 f"<passage>\n{passage.strip()}\n</passage>")
  if memory:
    parts.append("Environments already in the curriculum, with how the agent did on them. Do "
                 "not repeat them: move to new mechanics, and make mastered ideas harder.\n\n"
                 + "\n\n".join(format_memory_entry(i + 1, m) for i, m in enumerate(memory)))
  parts.append(f"Target skill category: {category}. Write one new environment that trains "
               "this skill, then its hint.")
  return "\n\n".join(parts)


def designer_messages(category: str, passage: str | None, memory: Sequence[MemoryView] = (),
                      setting: str = "games", reward: str = "hint_regret",
                      origin: str | None = None, style: str = "full") -> list[dict[str, str]]:
  return [{"role": "system", "content": designer_system_prompt(setting, reward, style)},
          {"role": "user", "content": designer_user_message(category, passage, memory, origin)}]


def agent_system_prompt(action_format: str, hint: str | None = None,
                        tools: bool = False) -> str:
  """Agent role; the hint arm appends the designer's privileged hint."""
  prompt = _AGENT_ROLE_TOOLS if tools else _AGENT_ROLE.format(
      action=action_format_example(action_format))
  if hint:
    prompt += f"\n\nPrivileged hint for this environment:\n{hint.strip()}"
  return prompt


def agent_messages(first_observation: str, action_format: str, hint: str | None = None,
                   tools: bool = False) -> list[dict[str, str]]:
  return [{"role": "system", "content": agent_system_prompt(action_format, hint, tools)},
          {"role": "user", "content": first_observation}]
