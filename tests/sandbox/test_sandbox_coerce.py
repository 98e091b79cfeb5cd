"""What hostile environments return never raises in the host (issue 48, point 3).

Each hostile environment below broke the host on a real pool (an exception out of the pool,
the check CLI or the episode runner); now it is an error record, an invalid verdict or one
unplayable episode. Its benign twin, one change away, still validates and scores.
"""

import json
import pathlib
import random
import sys

import pytest

from spade_jax.engine.api import SamplingParams
from spade_jax.engine.fake import FakeEngine
from spade_jax.sandbox import check, contract
from spade_jax.selfplay.chat import ChatFormatter
from spade_jax.selfplay.episodes import EpisodeSettings, EpisodeSpec, play_episodes
from spade_jax.selfplay.timing import Timings
from spade_jax.tokenizer.chat_template import default_chat_template
from tests.selfplay.selfplay_fakes import ByteTokenizer

GUESS = '''\
import json
import random


class Guess:
  """Guess a hidden number in [1, 20]: 0.5 for a first wrong guess, the rest for the target."""

  max_turns = 6

  def reset(self, seed=None):
    self.target = random.Random(seed).randint(1, 20)
    self.turns = 0
    PREPARE
    return FIRST, INFO

  def step(self, action):
    self.turns += 1
    try:
      guess = int(action.strip())
    except ValueError:
      return "Answer with one integer, for example 7.", 0.0, False, False, {}
    if guess == self.target:
      return "Correct!", WIN, True, False, {}
    hint = "higher" if guess < self.target else "lower"
    return f"{guess} is wrong; go {hint}.", MISS, False, False, {}

  def oracle_actions(self):
    return [str(self.target)]
'''
SLOTS = {"PREPARE": "info = {}",
         "FIRST": '"I picked a number from 1 to 20. Answer with one integer."',
         "INFO": "info", "WIN": "(0.5 if self.turns > 1 else 1)",
         "MISS": "(0.5 if self.turns == 1 else 0.0)"}
# Forces the runner's JSON encoding to escape non-ASCII, so a lone surrogate crosses the pipe.
ASCII_JSON = ("dumps = json.dumps\n    json.dumps = lambda *a, **k: dumps(*a, **dict(k, "
              "ensure_ascii=True))\n    info = {}")


def guess(**slots: str) -> str:
  source = GUESS
  for name, default in SLOTS.items():
    source = source.replace(name, slots.get(name, default))
  return source


def nested_info(depth: str) -> str:
  """PREPARE code that nests `info` `depth` dicts deep."""
  return f"info = {{}}\n    for _ in range({depth}):\n      info = {{'a': info}}"


def bank(default_depth: int) -> str:
  """The bank seed environment with a `default` nested default_depth lists deep in a schema."""
  source = (pathlib.Path(__file__).parents[2] / "spade_jax/envs/seeds/tool_use/bank.py"
            ).read_text()
  old = '"description": "amount in cents, > 0"}'
  assert old in source
  nest = f'json.loads("[" * {default_depth} + "]" * {default_depth})'
  return source.replace(old, old[:-1] + f', "default": {nest}}}')


# item -> (hostile source, benign twin, a phrase of the hostile's validation reason or None
# when the hostile is valid: the framework makes it harmless)
VALIDATED = {
    "huge_int_reward": (guess(WIN="10**400"), guess(WIN="1"), "integer too large"),
    "reserved_info_keys": (guess(INFO='{"tools": "not specs", "max_turns": 99}'),
                           guess(INFO='{"level": 1}'), None),
    "deep_tool_spec": (bank(450), bank(3), "nested deeper"),
    "lone_surrogate": (guess(PREPARE=ASCII_JSON, FIRST=r'"I picked \ud800 a number."'),
                       guess(FIRST='"Ich wähle ☃ 🎲, a number."'), "not valid Unicode"),
    "huge_intermediate_reward": (guess(MISS="(0.5 if self.turns == 1 else 1e308)"), guess(),
                                 "return: the episode return"),
    "deep_info": (guess(PREPARE=nested_info("seed % 1000")), guess(PREPARE=nested_info("seed % 4")),
                  "nested"),
    "template_guard": (guess(FIRST='"<tool_response>Pick 1 to 20.</tool_response>"'), guess(),
                       None),
}


@pytest.mark.parametrize("item", sorted(VALIDATED))
def test_hostile_sources_get_a_verdict_and_twins_stay_valid(pool, item):
  hostile, twin, reason = VALIDATED[item]
  bad, good = pool.validate([hostile, twin])
  assert good.valid, good.reason
  if reason is None:
    assert bad.valid, bad.reason
  else:
    assert not bad.valid and reason in bad.reason, bad.reason


def test_an_integer_reward_too_large_for_a_float_is_bad_output(pool):
  hostile, twin, _ = VALIDATED["huge_int_reward"]
  target = str(random.Random(4).randint(1, 20))
  pool.reset([("hostile", hostile, 4), ("twin", twin, 4)])
  bad, good = pool.step([("hostile", target), ("twin", target)])
  assert bad.error_kind == "bad_output" and "too large for a float" in bad.error_detail
  assert (good.error_kind, good.reward, good.terminated) == (None, 1.0, True)


def _refuse(name: str):
  raise ValueError(f"{name} is not strict JSON")


class _Borrowed:
  """The module's pool for check.main, which must not close it."""

  def __init__(self, pool):
    self.pool = pool

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return None

  def __getattr__(self, name):
    return getattr(self.pool, name)


def test_check_cli_gives_every_file_its_strict_json_line(pool, tmp_path, monkeypatch, capsys):
  hostile, twin, _ = VALIDATED["huge_int_reward"]
  files = []
  for name, source in (("hostile", hostile), ("surrogate", VALIDATED["lone_surrogate"][0]),
                       ("twin", twin)):
    files.append(tmp_path / f"{name}.py")
    files[-1].write_text(source, encoding="utf-8")
  actions = tmp_path / "actions.txt"
  actions.write_text(f"{random.Random(0).randint(1, 20)}\n")
  monkeypatch.setattr(check, "SandboxPool", lambda **kwargs: _Borrowed(pool))
  assert check.main([*map(str, files), "--actions", str(actions)]) == 0
  out = capsys.readouterr().out
  assert out.isascii()
  lines = [json.loads(line, parse_constant=_refuse) for line in out.splitlines()]
  assert [line["file"] for line in lines] == list(map(str, files))
  assert not lines[0]["valid"] and "too large" in lines[0]["error"]
  assert not lines[1]["valid"] and "not valid Unicode" in lines[1]["error"]
  assert lines[2]["valid"] and lines[2]["return"] == 1.0


# Newer Qwen chat templates refuse a conversation whose user turns all look like tool results.
GUARD = """{%- set guard = namespace(no_query=true) %}
{%- for message in messages %}
  {%- if message.role == 'user' and not (message.content.startswith('<tool_response>')
      and message.content.endswith('</tool_response>')) %}
    {%- set guard.no_query = false %}
  {%- endif %}
{%- endfor %}
{%- if guard.no_query %}
  {{- raise_exception('No user query found in messages.') }}
{%- endif %}
"""


class GuardedTokenizer(ByteTokenizer):
  def __init__(self):
    super().__init__()
    self.chat_template = GUARD + default_chat_template()


TOK = GuardedTokenizer()


def test_tool_specs_are_bounded_in_depth(pool):
  hostile, twin, _ = VALIDATED["deep_tool_spec"]
  bad, good = pool.reset([("hostile", hostile, 0), ("twin", twin, 0)])
  pool.close_episodes(["hostile", "twin"])
  assert bad.error_kind == "bad_output" and "nested" in bad.error_detail
  assert good.error_kind is None and len(good.info["tools"]) == 3
  assert ChatFormatter(TOK).prompt_ids([{"role": "user", "content": "hi"}],
                                       tools=good.info["tools"])


def _nested(depth: int) -> str:
  return '{"a": ' * depth + "{}" + "}" * depth


def _decoder_limit() -> int:
  """The deepest dict nesting json.loads decodes when called from here."""
  low, high = 1, sys.getrecursionlimit()
  while low < high:
    mid = (low + high + 1) // 2
    try:
      json.loads(_nested(mid))
      low = mid
    except RecursionError:
      high = mid - 1
  return low


def test_info_nested_up_to_the_decoders_limit_is_bad_output(pool):
  hostile, twin, _ = VALIDATED["deep_info"]
  # The pool decodes a few frames deeper than this test and reads info deeper still: around
  # the limit, some depth decodes but could not be encoded again (RecursionError).
  limit = _decoder_limit()
  seeds = range(limit - 40, limit + 1)
  records = pool.reset([(seed, hostile, seed) for seed in seeds] + [("twin", twin, 3)])
  pool.close_episodes([*seeds, "twin"])
  assert {r.error_kind for r in records[:-1]} == {"bad_output"}, records[0]
  assert records[-1].error_kind is None
  assert records[-1].info == {"a": {"a": {"a": {}}}, "max_turns": 6}


SEED = 5


def play(pool, sources: dict[str, str]) -> dict:
  """Plays each source (seed SEED, 3 turns): two wrong guesses, then the target."""
  actions = ["0", "0", str(random.Random(SEED).randint(1, 20))]
  turns = {}

  def reply_fn(cid, history, params):
    turns[cid] = turns.get(cid, -1) + 1
    ids = TOK.encode(f"<action>{actions[turns[cid]]}</action>") + [TOK.eos_id]
    return ids, [0.0] * len(ids)

  specs = [EpisodeSpec(name, name, "no_hint", source, None, SEED, 0, 3)
           for name, source in sources.items()]
  params = SamplingParams(max_new_tokens=64, stop_token_ids=TOK.stop_ids)
  episodes = play_episodes(FakeEngine(reply_fn, num_slots=4, steps_per_poll=64), pool,
                           ChatFormatter(TOK), specs, EpisodeSettings("<action>{}</action>",
                                                                      params), Timings())
  return {ep.spec.key: ep for ep in episodes}


def _scores(ep) -> None:
  assert ep.playable and ep.error_kind is None and ep.terminated, ep.error_detail
  assert ep.rewards == [0.5, 0.0, 0.5] and ep.episode_return == 1.0


@pytest.mark.parametrize("item", ["reserved_info_keys", "lone_surrogate",
                                  "huge_intermediate_reward", "template_guard"])
def test_one_environment_fails_only_its_own_episode(pool, item):
  hostile, twin, _ = VALIDATED[item]
  episodes = play(pool, {"hostile": hostile, "twin": twin})
  _scores(episodes["twin"])
  bad = episodes["hostile"]
  if item == "reserved_info_keys":
    _scores(bad)
    assert bad.tools is None
  elif item == "template_guard":  # the template sees environment text marked, never as markup
    _scores(bad)
  elif item == "huge_intermediate_reward":
    assert bad.rewards == [0.0, 0.0] and bad.episode_return == 0.0
    assert bad.playable and bad.error_kind == "bad_output"
    assert bad.error_detail.startswith(contract.RETURN_RANGE_ERROR)
  else:
    assert bad.unplayable and bad.error_kind == "bad_output", bad
  if item == "lone_surrogate":
    assert episodes["twin"].first_observation == "Ich wähle ☃ 🎲, a number."
