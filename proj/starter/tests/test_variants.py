"""The starter environment set: distinct train-split variants, validated, deterministic."""

import collections
import itertools
import json
import re
import subprocess
import sys

import pytest

from proj.starter import env_set, variant_tables, variants
from spade_jax.envs.library import GAME_CATEGORIES, HELDOUT_GAMES, load_seed_library
from spade_jax.sandbox.pool import SandboxPool
from spade_jax.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def stream(words):
  return list(itertools.islice(variants.candidates(0, words=words), 320))


def test_the_stream_holds_300_distinct_variants_of_the_train_games_only(stream):
  keys = [variants.normalise_source(e.source) for e in stream]
  assert len(set(keys)) == len(stream) == 320
  seeds = {variants.normalise_source(s.source) for s in load_seed_library(kind="games")}
  assert not seeds & set(keys)  # no seed (train or held-out) is in the set, not even renamed
  train = {s.name: s for s in load_seed_library(kind="games", split="train")}
  per_game = collections.Counter(e.base for e in stream)
  assert set(per_game) == set(train) and not set(per_game) & set(HELDOUT_GAMES)
  assert min(per_game.values()) >= 17
  for env in stream:
    assert env.uid.startswith(f"v/{env.base}/") and env.category == train[env.base].category


def test_variants_change_rules_not_only_layout(stream):
  train = {s.name: s for s in load_seed_library(kind="games", split="train")}
  env = stream[0]
  seed = train[env.base]
  assert variants.normalise_source(seed.source + "\n# a comment\n") == variants.normalise_source(
      seed.source.replace('"""', '"""Other words. ', 1))  # comments and docstrings do not count
  for env in stream:  # a renamed class, more turns or other messages alone make no variant
    knob_edits = [new for knob in variant_tables.KNOBS[env.base] for alt in knob
                  for _, new in alt.source]
    pinned = ".difficulty = " in env.source.rstrip().splitlines()[-1]
    assert pinned or any(new in env.source for new in knob_edits), env.uid
  adapted = [e for e in stream if e.base == "pancakes" and "SIZE = 4" in e.source]
  assert adapted and all("at most 5 flips" in e.hint for e in adapted)


def test_the_stream_is_deterministic_per_seed(stream, words):
  again = list(itertools.islice(variants.candidates(0, words=words), 40))
  assert again == stream[:40]
  other = list(itertools.islice(variants.candidates(1, words=words), 40))
  assert [e.source for e in other] != [e.source for e in stream[:40]]


def test_action_words_change_in_strings_and_hint_but_no_python_name_changes():
  sorting = {s.name: s for s in load_seed_library(kind="games", split="train")}["sorting"]
  source, hint = variants.rename_verbs(sorting.source, sorting.hint,
                                       {"answer": "claim", "compare": "poke"})
  assert 'fullmatch(r"(POKE|CLAIM)' in source and 'verb == "POKE"' in source  # the case kept
  assert "'claim {answer}'" in source  # the f-string's field is a Python name: it stays
  assert "answer = " in source and 'return ["claim "' in source
  assert "Poke two boxes" in hint and "compare" not in hint.lower()
  assert variants.rename_verbs(sorting.source, sorting.hint, {}) == (sorting.source, sorting.hint)


def test_most_variants_play_drawn_words_and_none_a_held_out_games_words(stream, words):
  held_out = load_seed_library(kind="games", split="heldout")
  held_out_words = set().union(*(_pattern_words(g.source) for g in held_out))
  assert {"move", "accuse", "answer", "drop", "encrypt"} <= held_out_words
  seeds = {s.name: _pattern_words(s.source) for s in variants.train_seeds()}
  parsed, renamed = 0, 0
  for env in stream:
    taken = _pattern_words(env.source)
    drawn = taken - seeds[env.base]
    assert not drawn & held_out_words, (env.uid, drawn & held_out_words)
    assert drawn <= set(words), (env.uid, drawn - set(words))
    parsed += bool(taken)
    renamed += bool(drawn)
  assert parsed >= 0.8 * len(stream) and renamed >= 0.75 * parsed
  compass = {"north", "east", "south", "west"}
  spatial = [_pattern_words(e.source) for e in stream if e.base in ("robot", "dice")]
  assert sum(not compass & taken for taken in spatial) >= 0.2 * len(spatial)  # arguments too


def test_a_drawn_word_is_one_piece_so_its_first_token_can_only_be_read(stream, words, bpe):
  """Made-up words split into shared onset pieces (` d`, ` br`) that an agent can guess; a
  one-piece word drawn from thousands cannot be, so the reply's first token must be copied."""
  seeds = {s.name: _pattern_words(s.source) for s in variants.train_seeds()}
  drawn = [w for env in stream for w in sorted(_pattern_words(env.source) - seeds[env.base])]
  first_pieces = collections.Counter(bpe.encode(" " + w)[0] for w in drawn)
  assert all(len(bpe.encode(" " + w)) == 1 for w in drawn)
  assert len(drawn) >= 250 and len(first_pieces) >= 0.5 * len(drawn)
  assert max(first_pieces.values()) <= 0.02 * len(drawn)


def test_the_action_word_pool_is_one_piece_words_of_the_tokenizer(words, bpe, tmp_path, capsys):
  held_out = {w.lower() for g in load_seed_library(kind="games", split="heldout")
              for w in re.findall(r"[A-Za-z]+", g.source + " " + g.hint)}
  assert list(words) == sorted(set(words)) and len(words) >= variant_tables.MIN_ACTION_WORDS
  assert not set(words) & held_out
  assert all(re.fullmatch(r"[a-z]{4,10}", w) and len(bpe.encode(" " + w)) == 1 for w in words)
  assert variants.action_words(bpe) == words
  with pytest.raises(ValueError, match=r"^tokenizer: \d+ one-piece words can be action words, "
                                       r"expected at least 500"):
    variants.action_words(load_tokenizer("tiny"))
  with pytest.raises(ValueError, match="variants need action words"):
    variants.build_env_set(tmp_path / "set.jsonl", count=1)
  assert variants.main(["--out", str(tmp_path / "set.jsonl"), "--tokenizer", "tiny"]) == 2
  assert capsys.readouterr().err.startswith("error: tokenizer: ")
  with pytest.raises(SystemExit, match="2"):
    variants.main(["--out", str(tmp_path / "set.jsonl")])
  assert "--tokenizer is needed for --kind variants" in capsys.readouterr().err
  assert not (tmp_path / "set.jsonl").exists()


def _pattern_words(source):
  """The words (3+ letters, lower case) of the source's `fullmatch` action patterns."""
  patterns = re.findall(r'fullmatch\((?:rf|r)"([^"]+)"', source)
  return set(re.findall(r"[a-z]{3,}", " ".join(patterns).lower()))


def test_a_variant_takes_its_drawn_word_and_not_the_seeds_in_the_sandbox(words):
  env = next(e for e in variants.candidates(0, words=words)
             if e.base == "pancakes" and not re.search(r"\bflip\b", e.source))
  word = re.search(r"Action format: (\w+) K", env.source).group(1)
  pool = SandboxPool(num_workers=1)
  try:
    pool.reset([("drawn", env.source, 3), ("seed's", env.source, 3)])
    drawn, seeds = pool.step([("drawn", f"{word} 2"), ("seed's", "flip 2")])
  finally:
    pool.close()
  assert "Invalid action" not in drawn.observation and "Invalid action" in seeds.observation


def test_build_validates_writes_and_resumes_after_a_damaged_last_line(tmp_path, words):
  path = tmp_path / "set.jsonl"
  stats = {}
  first = variants.build_env_set(path, count=10, num_workers=1, progress=False, stats=stats,
                                 words=words)
  assert [e.uid for e in first] == [e.uid for e in itertools.islice(
      variants.candidates(0, words=words), 10)]
  assert stats == {"validated": 10, "reused": 0, "rejected": {}}
  assert variants.load_env_set(path) == first
  text = path.read_text()
  path.write_text(text[:-40])  # a build killed while writing its last line
  with pytest.warns(UserWarning, match="dropping the damaged last line 10"):
    assert variants.load_env_set(path) == first[:9]
  stats = {}
  with pytest.warns(UserWarning, match="damaged last line"):
    resumed = variants.build_env_set(path, count=12, num_workers=1, progress=False, stats=stats,
                                     words=words)
  assert resumed[:10] == first and len(resumed) == 12
  assert stats["reused"] == 9 and stats["validated"] == 3
  assert variants.load_env_set(path) == resumed and path.read_text().count("\n") == 12


def test_the_real_validator_keeps_broken_variants_out(tmp_path, monkeypatch, words):
  good = list(itertools.islice(variants.candidates(0, words=words), 3))
  sudoku = next(e for e in variants.candidates(0, words=words) if e.base == "minisudoku")
  broken = [env_set.VariantEnv("v/minisudoku/9999", "minisudoku", "deduction",
                               sudoku.source.replace("BLANKS = ", "BLANKS = 3 + "), sudoku.hint),
            env_set.VariantEnv("v/mastermind/9999", "mastermind", "deduction",
                               good[0].source.replace("map(str, self.code)",
                                                      "map(str, self.code[::-1])"),
                               good[0].hint)]
  assert broken[1].source != good[0].source
  monkeypatch.setattr(variants, "candidates",
                      lambda seed, categories, words: iter([good[0], *broken, *good[1:]]))
  stats = {}
  envs = variants.build_env_set(tmp_path / "s.jsonl", count=3, num_workers=1, progress=False,
                                stats=stats, words=words)
  assert envs == good
  # 9 blanks and 8 turns: the oracle cannot finish; the reversed code: its oracle guesses wrong.
  assert stats["rejected"] == {"oracle": 2}


def test_a_damaged_line_inside_the_file_is_an_error(tmp_path, words):
  envs = list(itertools.islice(variants.candidates(0, words=words), 3))
  path = tmp_path / "set.jsonl"
  env_set.append_env_set(path, envs)
  lines = path.read_text().splitlines(keepends=True)
  row = json.loads(lines[1])
  row["hint"] = "edited"
  path.write_text(lines[0] + json.dumps(row) + "\n" + lines[2])
  with pytest.raises(ValueError, match="line 2 is damaged: its sha256 does not match"):
    variants.load_env_set(path)


def test_the_variant_modules_import_neither_jax_nor_the_model():
  code = ("import sys, proj.starter.variants; "
          "assert not [m for m in sys.modules if m == 'jax' or m.startswith('spade_jax.model')]")
  subprocess.run([sys.executable, "-c", code], check=True)


def test_a_minigame_set_builds_and_reads_back_with_its_own_uids(tmp_path):
  path = tmp_path / "minigames.jsonl"
  games = variants.build_env_set(path, count=8, num_workers=1, progress=False, kind="minigames")
  assert [g.uid for g in games] == [g.uid for g in
                                    itertools.islice(variants.minigame_candidates(0), 8)]
  assert variants.load_env_set(path) == games and games[0].uid.startswith("mg0/")
  forged = env_set.VariantEnv("mg0/mastermind/1", "mastermind", "deduction", "x = 1\n", "h")
  path.write_text(env_set.encode_line(forged) + env_set.encode_line(games[0]))
  with pytest.raises(ValueError, match="line 1 .*neither a train-split variant nor a minigame"):
    variants.load_env_set(path)


def test_a_set_of_some_categories_keeps_their_streams_in_order(tmp_path, capsys, words):
  """`categories` (the build passes config.selfplay.skills) keeps those skills' games in the
  stream's own order; all six categories leave the stream as it is."""
  deduction = variants.build_env_set(tmp_path / "d.jsonl", count=4, num_workers=1,
                                     progress=False, kind="minigames", categories=["deduction"])
  everything = list(itertools.islice(variants.minigame_candidates(0), 24))
  assert deduction == [g for g in everything if g.category == "deduction"][:4]
  assert all(g.base == "guess" for g in deduction)
  seeds = list(itertools.islice(variants.candidates(0, ["planning", "spatial"], words=words),
                                 12))
  assert {e.category for e in seeds} == {"planning", "spatial"}
  assert seeds == [e for e in itertools.islice(variants.candidates(0, words=words), 60)
                   if e.category in ("planning", "spatial")][:12]
  assert list(itertools.islice(variants.candidates(0, GAME_CATEGORIES, words=words), 30)) == list(
      itertools.islice(variants.candidates(0, words=words), 30))
  with pytest.raises(ValueError, match=r"categories \['dedcution'\]: expected some of"):
    variants.build_env_set(tmp_path / "x.jsonl", count=1, categories=["dedcution"])
  assert variants.main(["--out", str(tmp_path / "y.jsonl"), "--kind", "minigames",
                        "--categories", "dedcution"]) == 2
  err = capsys.readouterr().err.splitlines()  # one line, no traceback
  assert len(err) == 1 and err[0].startswith("error: categories ['dedcution']: expected some of")
