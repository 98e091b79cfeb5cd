"""The environment contract: what a generated environment must look like.

`CONTRACT_TEXT` is written so that the designer prompt can quote it verbatim. The
constants below it are the single source of the limits that the validator, the pool
and the host-side coercion enforce; the text is formatted from them so the two never
disagree.
"""

from __future__ import annotations

import textwrap

# Pure standard-library modules an environment may import (top-level names; submodules
# such as `collections.abc` are allowed with their parent). The static check that
# enforces this is a first filter only: isolation comes from the operating system.
ALLOWED_IMPORTS = frozenset({
    "__future__", "bisect", "collections", "copy", "dataclasses", "decimal", "enum",
    "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "random",
    "re", "statistics", "string", "textwrap", "typing",
})

MAX_SOURCE_CHARS = 40_000  # longer sources are rejected before anything runs
MAX_OBS_CHARS = 4_000  # observations are cut to this many characters (marked as cut)
MAX_INFO_CHARS = 16_000  # an info dict whose JSON is longer is bad output
MAX_INFO_DEPTH = 16  # an info dict nested deeper (dicts and lists) is bad output
# Info keys the framework sets in the reset record (from the class attributes); an
# environment's own values for them are dropped.
RESERVED_INFO_KEYS = ("max_turns", "tools", "difficulty_levels")
MAX_ACTION_CHARS = 8_000  # actions are cut to this many characters before `step`
MAX_TOOLS = 32  # at most this many tool specs in `tools`
MAX_TOOLS_CHARS = 32_000  # the tool specs' JSON is at most this long (it goes into every prompt)
MAX_TOOLS_DEPTH = 40  # tool specs nest at most this deep (room for schema.MAX_DEPTH schemas)
MAX_REPLY_DEPTH = 64  # a reply nested deeper is bad output before anything recursive reads it
MAX_MESSAGE_BYTES = 256 * 1024  # one encoded reply of an environment call
MAX_TURNS_CAP = 64  # upper bound on any episode length, whatever `max_turns` says
RETURN_TOLERANCE = 1e-6  # a running return outside [-tol, 1 + tol] after any step is flagged
RETURN_RANGE_ERROR = "return out of range"  # starts the detail of that error record
MAX_DIFFICULTY_LEVELS = 10  # an environment may declare 2..this many difficulty levels

DEFAULT_RESET_TIMEOUT_S = 2.0  # wall clock for loading the source and calling reset
DEFAULT_STEP_TIMEOUT_S = 1.0  # wall clock for one step
DEFAULT_MEMORY_MB = 1024  # address-space cap of an environment's process

SEED_RANGE = 1 << 31  # episode seeds, in training and validation alike, are drawn from [0, this)
VALIDATION_SEED_COUNT = 3  # fresh random seeds each validation plays every action set on
VALIDATION_STEPS = 4  # random-action steps per validation episode
MIN_DISTINCT_EPISODES = 2  # fewer distinct episodes over those seeds: flagged as constant
VALIDATION_LIVE_EPISODES = 64  # validation episodes running at once (each its own process)
PROBE_STEPS = 12  # steps of each degenerate-policy probe episode (fewer if max_turns is lower)
PROBE_SEED_COUNT = 3  # fresh random seeds for the oracle and each degenerate-policy probe
ORACLE_MIN_RETURN = 0.99  # oracle_actions() must reach this return on every probe seed
DEGENERATE_MAX_RETURN = 0.5  # a degenerate policy reaching this mean return: hackable
STUFFED_NUMBERS = 1000  # the stuffed probe reply lists the integers 0..999 among its guesses
INSTRUCTION_PREFIX = "User:"  # an observation line starting so poses a user instruction
MIN_INSTRUCTIONS = 2  # a tool-use oracle episode must pose at least this many instructions

_RESERVED = ", ".join(RESERVED_INFO_KEYS[:-1]) + " and " + RESERVED_INFO_KEYS[-1]
_ALLOWED_LIST = textwrap.fill(
    ", ".join(sorted(ALLOWED_IMPORTS - {"__future__"})), width=88, subsequent_indent="    ")

CONTRACT_TEXT = f"""\
ENVIRONMENT CONTRACT
Write one Python source file that defines exactly one class (any name) with these methods:

  def reset(self, seed: int | None = None) -> tuple[str, dict]:
      Start a new episode and return (first_observation, info).
      All randomness must come from random.Random(seed): the same seed must give the same
      episode, and different seeds must give different episodes (different puzzles,
      not the same answer every time).

  def step(self, action: str | dict) -> tuple[str, float, bool, bool, dict]:
      Apply the agent's action and return
      (observation, reward, terminated, truncated, info).
      The action is the agent's text (a str), or, in a tool-use environment, a tool call
      already parsed into a dict {{"name": str, "arguments": dict}}.
      terminated=True when the episode is over (solved or failed for good);
      truncated=True when you stop it for another reason (for example a turn limit).

Optional class attributes:
  max_turns: int    The framework truncates the episode after this many steps
                    (and never allows more than {MAX_TURNS_CAP}, nor more than its own cap).
  tools: list[dict] For tool-use environments: tool specs in OpenAI function-calling form,
                    {{"type": "function", "function": {{"name": str, "description": str,
                    "parameters": <JSON schema object>}}}}, at most {MAX_TOOLS} (at most
                    {MAX_TOOLS_CHARS} characters of JSON, nested at most {MAX_TOOLS_DEPTH}
                    levels deep). They are shown to the agent; each tool call it makes
                    reaches step as the dict {{"name": "<tool>", "arguments": {{...}}}},
                    and its plain replies to the user as a str. The schemas may use
                    type, properties, required, enum, items and description. Required in
                    the tool-use setting.
                    A tool-use environment poses a sequence of user instructions, each an
                    observation line starting with "{INSTRUCTION_PREFIX}": reset's observation
                    poses the first, the observation after one is done the next. Played in
                    order, the actions of oracle_actions() must meet at least
                    {MIN_INSTRUCTIONS} different instructions before the episode's last step.
  difficulty_levels: int
                    Number of difficulty levels, 2 to {MAX_DIFFICULTY_LEVELS}. Also define the
                    class attribute difficulty = 0; the framework may set it to a level in
                    [0, difficulty_levels) before creating the environment, and reset must
                    make the puzzle harder as it grows (0 is the easiest).

Optional method (the validator uses it; a run may require it):
  def oracle_actions(self) -> list:
      Called right after reset: the actions (strs, or tool-call dicts) that solve the
      current instance, computed from the hidden state. Played in order, they must reach
      a return of at least {ORACLE_MIN_RETURN:g}.

Rules:
  - The class must be constructible with no arguments: Env().
  - The episode's return (the sum of all rewards) must lie in [0, 1], and so must the sum of
    the rewards so far after every step (an episode may be cut short at any step). Give
    partial rewards for progress, and the remainder for solving.
  - Observations are plain text of at most {MAX_OBS_CHARS} characters; longer ones are cut.
  - info must be a dict of JSON values (str, int, float, bool, None, list, dict) whose JSON
    is at most {MAX_INFO_CHARS} characters, nested at most {MAX_INFO_DEPTH} levels deep; its
    keys {_RESERVED} belong to the framework. Rewards must be finite numbers.
  - An unexpected or malformed action must not crash the environment: answer it with an
    observation that explains the expected format. A tool call whose arguments match the
    tool's schema must get a tool result, never a crash.
  - Degenerate play must not pay: empty replies, repeating the example action of the first
    observation, one reply that lists many candidate answers, echoing the observation back,
    or alternating between two replies must earn a mean return below {DEGENERATE_MAX_RETURN:g}.
  - reset must finish within {DEFAULT_RESET_TIMEOUT_S:g} s and each step within
    {DEFAULT_STEP_TIMEOUT_S:g} s; memory is limited to {DEFAULT_MEMORY_MB} MiB.
  - Imports are limited to these standard-library modules:
    {_ALLOWED_LIST}.
  - Do not use eval, exec, compile, open, input, globals, locals, vars, __import__ or
    introspection attributes such as __dict__, __globals__, __subclasses__ or __code__.
  - No files, network, subprocesses or threads: the code runs in an isolated sandbox where
    they fail. Anything printed is discarded.
"""

EXAMPLE_ENV = '''\
import random


class GuessNumber:
  """Guess a hidden number in [1, 20]; the observation says higher or lower."""

  max_turns = 6

  def reset(self, seed=None):
    self.rng = random.Random(seed)
    self.target = self.rng.randint(1, 20)
    self.turns = 0
    return "I picked a number from 1 to 20. Answer with one integer.", {}

  def step(self, action):
    self.turns += 1
    try:
      guess = int(action.strip())
    except ValueError:
      return "Answer with one integer, for example 7.", 0.0, False, False, {}
    if guess == self.target:
      return "Correct!", 1.0, True, False, {}
    hint = "higher" if guess < self.target else "lower"
    return f"{guess} is wrong; go {hint}.", 0.0, False, False, {}

  def oracle_actions(self):
    return [str(self.target)]
'''
