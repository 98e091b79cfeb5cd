"""scripts/matrix_criteria.py on a matrix root written here: records, run records, curriculum
logs and step times made up so that each criterion passes, or fails alone; missing data is
"n/a", a damaged file one line and exit 2."""

import importlib.util
import json
import math
import pathlib

import numpy as np
import pytest

from spade_jax.metrics.tensorboard import SummaryWriter

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "matrix_criteria.py"
_SPEC = importlib.util.spec_from_file_location("matrix_criteria", _PATH)
crit = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(crit)

GAMES = {f"mg2/{family}/{n}": family for family in ("locate", "peek", "quiz") for n in range(4)}
ITEMS = [f"{uid}/{seed}" for uid in GAMES for seed in (2000, 2001)]
K = 3  # config.json's selfplay.k: not the default, so a reader must take it from there
REFRESHES, DESIGNS = 24, 20  # refreshes 10..13 lie between the first and the last ten
SPADE_GAIN = {0: 0.3, 1: 0.4, 2: 0.5}
GRPO_GAIN = 0.2
# Seconds a step: spade's step 20 is within grpo's 40 steps (250 s), its step 40 is not; the
# launches' wall times (compiles and evaluations too) are not what P3 matches.
STEP_S = {"spade": 10.0, "grpo": 6.25}
GRPO_WALL = (150.0, 300.0)


def _category(item: str) -> bool:
  return GAMES[item.rsplit("/", 1)[0]] in crit.FAMILIES


def _returns(gain: float, noise: float = 0.02) -> dict[str, float]:
  """Baseline 0.1 + 0.01 n; the category's items up by `gain` give or take `noise` (mean
  zero), the others down 0.1."""
  out = {}
  for n, item in enumerate(ITEMS):
    jitter = noise if n % 2 else -noise
    out[item] = 0.1 + 0.01 * n + ((gain + jitter) if _category(item) else -0.1)
  return out


BASELINE = {item: 0.1 + 0.01 * n for n, item in enumerate(ITEMS)}


def _write_records(path: pathlib.Path, returns: dict[str, float]) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  rows = [{"suite": crit.SUITE, "id": item, "prompt": "", "responses": ["a", "b"],
           "answers": [None, None], "scores": [value, value + 0.3], "score": value,
           "details": ["no_hint", "hint"]} for item, value in returns.items()]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _curriculum(first: int, last: int) -> list[dict]:
  """Designs of each refresh at its first two steps, `first` / `last` of DESIGNS mattering in
  the first / last ten refreshes (all in between); a seed env with a big gap and a replayed
  older design with a big gap beside them, neither of which may count."""
  lines = []
  for r in range(REFRESHES):
    matters = first if r < 10 else last if r >= REFRESHES - 10 else DESIGNS
    for offset in (0, 1):
      envs = [{"uid": f"d{r}_{i}", "origin": "designed", "category": "probing",
               "returns": {"no_hint": [0.2, 0.3], "hint": [0.8, 0.7] if i < matters else
                           [0.3, 0.3]}} for i in range(DESIGNS)]
      envs.append({"uid": "seed", "origin": "seed", "returns": {"no_hint": [0.0], "hint": [1.0]}})
      if r:
        envs.append({"uid": f"d{r - 1}_{DESIGNS - 1}", "origin": "designed",
                     "returns": {"no_hint": [0.0], "hint": [1.0]}})
      lines.append({"step": r * K + 1 + offset, "memory": [], "envs": envs})
  lines.append({"step": REFRESHES * K, "memory": [], "envs": []})
  return lines


def _write_run(root, variant, seed, *, gain=None, noise=0.02, matters=None, done=True):
  workdir = root / variant / f"seed{seed}"
  workdir.mkdir(parents=True)
  launches = [{"rc": None, "wall_s": GRPO_WALL[0]}, {"rc": 0, "wall_s": GRPO_WALL[1]}]
  (workdir / crit.RUN_RECORD).write_text(json.dumps({"argv": [], "done": done,
                                                     "launches": launches}))
  if gain is not None:
    _write_records(workdir / "eval" / "step_20.jsonl", _returns(gain / 2, noise))
    _write_records(workdir / "eval" / "step_40.jsonl", _returns(gain, noise))
  if matters is not None:
    (workdir / "config.json").write_text(json.dumps({"selfplay": {"k": K}}))
    (workdir / "curriculum.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in _curriculum(*matters)))
  if variant in STEP_S:
    writer = SummaryWriter(workdir / "tb")
    for step in range(1, 41):
      writer.scalars({"time/step_s": STEP_S[variant]}, step)
    writer.close()


def _make_root(tmp_path, *, grpo_gain=None, noise=None, matters=None):
  """A finished matrix where everything passes, but for the overrides (seed -> gain,
  (variant, seed) -> noise, (variant, seed) -> (first, last))."""
  root = tmp_path / "root"
  _write_records(root / crit.BASELINE, BASELINE)
  matters = {**{("spade", s): (4, 14) for s in crit.SEEDS},
             **{("spade_frozen", s): (4, 8) for s in crit.SEEDS}, **(matters or {})}
  noise, grpo_gain = noise or {}, grpo_gain or {}
  for s in crit.SEEDS:
    _write_run(root, "spade", s, gain=SPADE_GAIN[s], noise=noise.get(("spade", s), 0.02),
               matters=matters[("spade", s)])
    _write_run(root, "spade_frozen", s, matters=matters[("spade_frozen", s)])
    _write_run(root, "grpo", s, gain=grpo_gain.get(s, GRPO_GAIN))
  return root


CASES = {  # name -> (overrides, P1, P2 (every spade rise, pairs))
    "everything passes": ({}, "pass", ("pass", "pass", "pass")),
    "P1: one grpo seed gains too little": ({"grpo_gain": {2: 0.05}}, "fail",
                                           ("pass", "pass", "pass")),
    "P1: one spade seed's gain is within 3 se": ({"noise": {("spade", 1): 0.6}}, "fail",
                                                 ("pass", "pass", "pass")),
    "P2: one spade seed rises too little": (
        {"matters": {("spade", 0): (4, 8), ("spade_frozen", 0): (4, 4)}}, "pass",
        ("fail", "fail", "pass")),
    "P2: two seeds rise no more than frozen": (
        {"matters": {("spade_frozen", 0): (4, 13), ("spade_frozen", 1): (4, 13)}}, "pass",
        ("fail", "pass", "fail")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_criterion_passes_or_fails_alone(tmp_path, case):
  overrides, p1, (p2, spade_rise, pairs) = CASES[case]
  result = crit.criteria(str(_make_root(tmp_path, **overrides)), crit.SEEDS, GAMES)
  assert result["P1"]["verdict"] == p1
  assert (result["P2"]["verdict"], result["P2"]["spade_rise"], result["P2"]["pairs"]) == (
      p2, spade_rise, pairs)


def test_p1_numbers(tmp_path):
  runs = crit.criteria(str(_make_root(tmp_path, grpo_gain={2: 0.05})), crit.SEEDS,
                       GAMES)["P1"]["runs"]
  assert sorted(runs) == [f"{v}/seed{s}" for v in ("grpo", "spade") for s in crit.SEEDS]
  spade1 = runs["spade/seed1"]
  assert spade1["step"] == 40 and spade1["n"] == 16  # the last evaluation, the 16 probing items
  np.testing.assert_allclose(spade1["gain"], 0.4)
  d = np.array([0.38, 0.42] * 8)
  np.testing.assert_allclose(spade1["se"], d.std(ddof=1) / 4)
  assert spade1["passes"] and not runs["grpo/seed2"]["passes"]
  # all 24 items: 16 up by the gain, 8 (quiz) down 0.1
  np.testing.assert_allclose(spade1["all_families"]["gain"], (16 * 0.4 - 8 * 0.1) / 24)


def test_p2_numbers(tmp_path):
  runs = crit.criteria(str(_make_root(tmp_path)), crit.SEEDS, GAMES)["P2"]
  spade = runs["runs"]["spade/seed0"]
  assert spade["refreshes"] == REFRESHES
  assert spade["first"] == {"share": 0.2, "matters": 40, "designs": 200}  # once each
  assert spade["last"] == {"share": 0.7, "matters": 140, "designs": 200}
  np.testing.assert_allclose(spade["rise"], 0.5)
  np.testing.assert_allclose(runs["rise_over_frozen"]["seed1"], 0.5 - 0.2)


def test_design_regrets_take_the_first_refresh_and_k(tmp_path):
  steps = [{"step": 1, "envs": [{"uid": "a", "origin": "designed",
                                 "returns": {"hint": [0.5], "no_hint": [0.25]}}]},
           {"step": 2, "envs": [{"uid": "a", "origin": "designed",
                                 "returns": {"hint": [1.0, 1.0], "no_hint": [0.25]}},
                                {"uid": "b", "origin": "designed",
                                 "returns": {"hint": [0.5], "no_hint": [None]}}]},
           {"step": 3, "envs": [{"uid": "a", "origin": "designed",
                                 "returns": {"hint": [1.0], "no_hint": [0.0]}},
                                {"uid": "c", "origin": "designed",
                                 "returns": {"hint": [0.5], "no_hint": [0.25]}}]}]
  two = crit.design_regrets(steps, 2)  # a: steps 1-2 of refresh 0; b: no no-hint return
  assert two == {"a": crit.Design(0, 2.5 / 3 - 0.25), "c": crit.Design(1, 0.25)}
  assert crit.design_regrets(steps, 3)["a"] == crit.Design(0, 3.5 / 4 - 0.5 / 3)
  assert crit.design_regrets(steps, 1)["a"] == crit.Design(0, 0.25)
  assert crit.share(two.values()) == {"share": 1.0, "matters": 2, "designs": 2}  # 0.25 counts
  assert crit.shares_by_refresh([crit.Design(0, 0.3), crit.Design(0, 0.1),
                                 crit.Design(2, 0.0)]) == {0: 0.5, 2: 0.0}
  (tmp_path / "config.json").write_text(json.dumps({"selfplay": {"k": 5}}))
  assert crit.refresh_k(str(tmp_path)) == 5
  assert crit.refresh_k(str(tmp_path / "nope")) == crit.DEFAULT_K


def test_p3_deltas_and_matched_wall_time(tmp_path):
  p3 = crit.criteria(str(_make_root(tmp_path)), crit.SEEDS, GAMES)["P3"]
  seed0 = p3["per_seed"]["seed0"]
  np.testing.assert_allclose(seed0["delta"], 0.3 - GRPO_GAIN)
  assert seed0["grpo_wall_s"] == 40 * STEP_S["grpo"]
  assert seed0["matched"]["step"] == 20 and seed0["matched"]["wall_s"] == 200.0
  np.testing.assert_allclose(seed0["matched"]["delta"], 0.15 - GRPO_GAIN)
  half = 2.919986 * 0.1 / math.sqrt(3)  # t(0.95, df 2) * sd / sqrt(n)
  np.testing.assert_allclose(p3["final"]["mean"], 0.2)
  np.testing.assert_allclose(p3["final"]["ci90"], [0.2 - half, 0.2 + half], rtol=1e-5)
  np.testing.assert_allclose(p3["matched_wall"]["mean"], 0.0, atol=1e-12)
  np.testing.assert_allclose(p3["matched_wall"]["ci90"], [-0.5 * half, 0.5 * half], rtol=1e-5)
  assert crit.t_interval([0.4]) == {"mean": 0.4, "ci90": None, "n": 1}


def test_missing_data_is_n_a_with_the_reason(tmp_path):
  root = _make_root(tmp_path)
  record = root / "grpo" / "seed1" / crit.RUN_RECORD
  record.write_text(json.dumps({"argv": [], "done": False, "launches": []}))
  for path in (root / "spade_frozen" / "seed2").iterdir():
    path.unlink()
  (root / "spade_frozen" / "seed2").rmdir()
  result = crit.criteria(str(root), crit.SEEDS, GAMES)
  assert result["P1"]["verdict"] == "n/a"
  assert result["P1"]["runs"]["grpo/seed1"] == {"n/a": f"{root}/grpo/seed1: not finished"}
  assert result["P2"]["runs"]["spade_frozen/seed2"]["n/a"].endswith("not started (no "
                                                                    "learning_run.json)")
  assert result["P2"]["verdict"] == "pass"  # seeds 0 and 1 already make two pairs
  assert "n/a" in result["P3"]["per_seed"]["seed1"] and result["P3"]["final"]["n"] == 2
  (root / crit.BASELINE).unlink()
  runs = crit.criteria(str(root), crit.SEEDS, GAMES)["P1"]["runs"]
  assert all(r == {"n/a": "no baseline.jsonl beside the runs"} for r in runs.values())


def test_main_prints_one_line_and_writes_the_markdown(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(crit, "game_families", lambda: GAMES)
  root = _make_root(tmp_path, grpo_gain={2: 0.05})
  assert crit.main(["--root", str(root)]) == 0
  result = json.loads(capsys.readouterr().out.strip())
  assert result["criteria"] == "matrix" and result["P1"]["verdict"] == "fail"
  md = (root / "criteria.md").read_text()
  assert "## P1: fail" in md and "## P2: pass" in md and "| spade/seed0 | 24 | 0.200 (40/200)" in md
  assert "- final, spade - grpo: mean +0.250 over 3 seeds, 90 % t-interval [" in md
  assert crit.HELDOUT_ITEMS == 280 and crit.FAMILIES == ("locate", "peek")


@pytest.mark.parametrize("damage", ["eval/step_40.jsonl", "curriculum.jsonl"])
def test_a_damaged_file_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, damage):
  monkeypatch.setattr(crit, "game_families", lambda: GAMES)
  root = _make_root(tmp_path)
  (root / "spade" / "seed1" / damage).write_text("{not json\n")
  assert crit.main(["--root", str(root)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and err.count("\n") == 1 and "spade/seed1" in err
