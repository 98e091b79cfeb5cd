r"""SPADE tool-use setting: environments are tool specs plus user instructions, k=8.

    python launch/tpu_run.py --config tool_use.py --workdir gs://BUCKET/spade/tool_use \
        --config.model.checkpoint=/path/to/Qwen3-30B-A3B-Instruct-2507 \
        --config.tokenizer=/path/to/Qwen3-30B-A3B-Instruct-2507

The designer emits OpenAI function-calling specifications and a sequence of user
instructions; the agent calls tools over several turns and the hint outlines a step-by-step
plan. The agent calls tools in Qwen3's own format, the one the chat template announces when
it renders `tools`: <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks, several
per reply allowed, each answered by its own tool turn; reasoning in <think> never counts
(spade_jax/selfplay/replies.py). Environments receive each call as a parsed dict, and the
validator requires `tools`, calls every tool with schema-valid arguments and rejects
hackable environments (spade_jax/sandbox/guards.py). Generation uses k=8 because tool
environments are costlier to produce (paper, "Experimental Setup"). Everything else follows
configs/games.py. Expected runtime: not measured here (no TPU run was made).
"""

import importlib.util
import pathlib

from ml_collections import ConfigDict

from spade_jax.envs.library import TOOL_CATEGORIES

_GAMES = pathlib.Path(__file__).with_name("games.py")


def _games_config() -> ConfigDict:
  spec = importlib.util.spec_from_file_location("spade_games_config", _GAMES)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def get_config() -> ConfigDict:
  c = _games_config()
  c.setting = "tool_use"  # tool-spec environments; Qwen3 <tool_call> replies, parsed calls
  c.selfplay.k = 8  # paper: larger refresh interval / designer delay for tool environments
  c.selfplay.skills = TOOL_CATEGORIES  # lookup, transaction, scheduling, data_transform
  c.selfplay.categories_per_step = 2  # categories drawn per refresh
  c.selfplay.max_turns = 12  # tool conversations run longer than games
  c.sampling.agent = {"max_new_tokens": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
  c.eval.suites = ("bfcl_v4_multi_turn", "reasoning_gym")  # tool use first, then reasoning
  c.eval.every = 16  # steps between evaluations
  c.eval.limit = 64  # first items of each suite
  return c
