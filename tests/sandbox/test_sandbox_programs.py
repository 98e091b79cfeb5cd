"""sandbox.programs: whole programs run in the pool report pass / fail / wrong output /
timeout / too big, in order across batches, and nothing they do reaches the host."""

from spade_jax.sandbox.programs import ProgramRun, run_programs


def test_outcomes_in_order_across_batches(clean_pool, tmp_path):
  marker = tmp_path / "written"
  runs = [
      ProgramRun("print(int(input()) * 2)", "21\n", "42"),
      ProgramRun("print(int(input()) * 2)", "21\n", "43"),
      ProgramRun("assert 1 == 2"),
      ProgramRun("import sys\nprint('ok')\nsys.exit(0)", expected_stdout="ok"),
      ProgramRun("import sys\nsys.exit(3)"),
      ProgramRun("import os\nwhile True:\n  os.fork()"),
      ProgramRun(f"open({str(marker)!r}, 'w').write('x')"),
      ProgramRun("while True:\n  pass"),
      ProgramRun("x = 1\n" * 8000),
  ]
  results = run_programs(clean_pool, runs, batch_size=4)
  assert [r.status for r in results] == ["passed", "wrong_output", "failed", "passed", "failed",
                                         "failed", "failed", "timeout", "too_big"]
  assert "AssertionError" in results[2].detail and "SystemExit(3)" in results[4].detail
  assert not marker.exists()
