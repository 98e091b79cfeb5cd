"""The seed library as a whole: manifest, loader, contract checks and robustness."""

import dataclasses
import json
import pathlib
import random
import subprocess
import sys

import pytest

from spade_jax.envs import difficulty, library
from spade_jax.sandbox import validate
from spade_jax.sandbox.fake import FakePool
from spade_jax.sandbox.pool import SandboxPool
from tests.envs.seedlib_play import env_class, seeds_by_name

NAMES = sorted(seeds_by_name())
GARBAGE = ["", " ", "?", "help", "42", "-7", "yes", "north", "A1", "1 2 3 4 5 6 7 8 9",
           "guess", "set 9 9 9", "move Z Q", "answer", "answer -1", "combine 1 / 0", "flip 0",
           '{"name": "nope", "arguments": {}}', '{"name": 3}', "<tool_call>{oops</tool_call>",
           '{"name": "transfer", "arguments": {"amount_cents": true}}', "[1, 2]", "null",
           "ünïcödé ☃", "\x00\x01", "x" * 5000, "<action>guess 1 1 2</action>", "drop 999"]
# At least one well-formed action for every seed.
PROBES = ["guess 1 2 3", "ask Ada", "suggest Plum rope kitchen", "set 1 1 1", "cross Ann Bob",
          "fill A", "move A B", "flip 3", "probe 0 0", "move north 1", "roll east", "move up",
          "mod 7", "combine 3 * 4", "buy 1 2 3", "set 2 2 10", "predict 5", "query 1",
          "test 1 2 3", "encrypt ab", "weigh 1 2 vs 3 4", "set 10101", "drop 3", "compare A B"]
# Tool-use seeds also get parsed tool calls (what the reply parser passes on), good and bad.
TOOL_CALLS = [{"name": "nope", "arguments": {}}, {"name": "transfer", "arguments": {}},
              {"name": "transfer", "arguments": {"amount_cents": True}},
              {"name": "list_events", "arguments": {"date": [1]}},
              {"name": "list_accounts", "arguments": {}},
              {"name": "search_products", "arguments": {"query": "pen"}},
              {"name": "list_events", "arguments": {"date": "2026-03-10"}},
              {"name": "search_people", "arguments": {"name": "a"}},
              {"name": "read_table", "arguments": {"table": "sales"}},
              {"name": "search_flights", "arguments": {"origin": "SFO", "destination": "JFK",
                                                       "date": "2026-05-10"}}]


def test_manifest_lists_every_seed_file_once():
  listed = sorted(entry["file"] for entry in library.read_manifest())
  on_disk = sorted(str(p.relative_to(library.SEEDS_DIR))
                   for p in library.SEEDS_DIR.glob("*/*.py"))
  assert listed == on_disk


def test_library_covers_the_categories():
  games = library.load_seed_library(kind="games")
  for category in library.GAME_CATEGORIES:
    assert sum(s.category == category for s in games) >= 4, category
  tools = library.load_seed_library(kind="tool_use")
  assert len(tools) >= 6 and {s.category for s in tools} <= set(library.TOOL_CATEGORIES)
  assert len(library.load_seed_library()) == len(games) + len(tools)


def test_loader_filters_and_rejects_unknown_names():
  picked = library.load_seed_library(kind="games", categories=["spatial", "probing"])
  assert picked and {s.category for s in picked} == {"spatial", "probing"}
  assert library.load_seed_library(kind="tool_use", categories=["spatial"]) == []
  with pytest.raises(ValueError, match="kind='puzzles'"):
    library.load_seed_library(kind="puzzles")
  with pytest.raises(ValueError, match="unknown categories"):
    library.load_seed_library(categories=["deductoin"])
  seed = picked[0]
  with pytest.raises(dataclasses.FrozenInstanceError):
    seed.hint = ""
  assert len(seed.hint) >= 80 and seed.description and "class " in seed.source


def test_manifest_errors_name_the_entry(tmp_path, monkeypatch):
  (tmp_path / "games").mkdir()
  (tmp_path / "games" / "a.py").write_text("class A:\n  pass\n")
  entry = {"name": "a", "file": "games/a.py", "kind": "games", "category": "cooking",
           "hint": "h", "description": "d"}
  (tmp_path / "manifest.json").write_text(json.dumps([entry]))
  monkeypatch.setattr(library, "SEEDS_DIR", tmp_path)
  monkeypatch.setattr(library, "MANIFEST", tmp_path / "manifest.json")
  with pytest.raises(ValueError, match=r"entry 0 \('a'\): category 'cooking'"):
    library.read_manifest()
  (tmp_path / "manifest.json").write_text(json.dumps([dict(entry, category="spatial", hint="")]))
  with pytest.raises(ValueError, match="field 'hint'"):
    library.read_manifest()


def test_every_seed_passes_the_sandbox_validator_with_every_guard():
  seeds = [seeds_by_name()[n] for n in NAMES]
  for seed in seeds:
    assert validate.static_check(seed.source).valid, seed.name
  for kind in library.KINDS:
    pool = FakePool(require_tools=kind == "tool_use", require_oracle=True)
    of_kind = [s for s in seeds if s.kind == kind]
    results = pool.validate([s.source for s in of_kind])
    bad = {s.name: r.reason for s, r in zip(of_kind, results, strict=True) if not r.valid}
    assert not bad


def test_every_declared_level_validates_and_differs_from_level_0():
  leveled = {n: seeds_by_name()[n].source for n in NAMES
             if difficulty.declared_levels(seeds_by_name()[n].source)}
  assert len(leveled) == 24  # every game
  sources = [difficulty.at_level(s, level) for s in leveled.values()
             for level in range(difficulty.declared_levels(s))]
  # Wall-clock limits are the sandbox tests' business; an in-process reset starved of CPU by a
  # loaded machine must not fail a test of the levels' validity.
  results = FakePool(reset_timeout_s=60, step_timeout_s=60).validate(sources)
  assert all(r.valid for r in results), [r.reason for r in results if not r.valid]
  for name, source in leveled.items():
    levels = difficulty.declared_levels(source)
    assert env_class(name).difficulty_levels == levels and env_class(name).difficulty == 0
    firsts = []
    for level in range(levels):
      env = env_class(name)()
      env.difficulty = level
      firsts.append(tuple(env.reset(s)[0] for s in range(12)))
    assert len(set(firsts)) == levels, f"{name}: a level plays like another"


def test_every_seed_validates_and_plays_in_the_real_sandbox():
  seeds = [seeds_by_name()[n] for n in NAMES]
  with SandboxPool(num_workers=1, require_oracle=True) as pool:
    results = pool.validate([s.source for s in seeds])
    bad = {s.name: r.reason for s, r in zip(seeds, results, strict=True) if not r.valid}
    assert not bad
    first = pool.reset([(s.name, s.source, 3) for s in seeds])
    assert [r.error_kind for r in first] == [None] * len(seeds)
    assert [r.observation for r in first] == [env_class(n)().reset(3)[0] for n in NAMES]
    pool.close_episodes(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_reset_is_deterministic_and_first_observations_vary(name):
  cls = env_class(name)
  firsts = set()
  for seed in range(8):
    first = cls().reset(seed)
    assert first == cls().reset(seed), name
    firsts.add(first[0])
  # Hidden-answer games may share a first observation; their solver tests check the episodes.
  assert len(firsts) >= 2, name


@pytest.mark.parametrize("name", NAMES)
def test_garbage_actions_never_crash_and_keep_the_return_in_range(name):
  cls = env_class(name)
  kind = seeds_by_name()[name].kind
  assert 1 <= cls.max_turns <= (8 if kind == "games" else 12)
  for seed in range(12):
    rng = random.Random(seed)
    env = cls()
    obs, info = env.reset(seed)
    assert isinstance(obs, str) and ("Action" if kind == "games" else "tools") in obs, obs
    json.dumps(info)
    total, done, turns = 0.0, False, 0
    while not done:
      action = rng.choice(GARBAGE + PROBES + (TOOL_CALLS if kind == "tool_use" else []))
      obs, reward, terminated, truncated, info = env.step(action)
      assert isinstance(obs, str) and obs and len(obs) <= 4000
      assert isinstance(terminated, bool) and isinstance(truncated, bool)
      json.dumps(info)
      total += reward
      turns += 1
      done = terminated or truncated
      assert turns <= cls.max_turns
    assert -1e-9 <= total <= 1 + 1e-9
    assert env.step("again")[1] == 0.0


def test_envs_package_never_imports_jax():
  code = ("import sys, spade_jax.envs.library as l; l.load_seed_library(); "
          "assert 'jax' not in sys.modules and 'flax' not in sys.modules")
  root = pathlib.Path(library.__file__).parents[2]
  subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
