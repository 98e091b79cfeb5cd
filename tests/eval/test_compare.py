"""`compare` prints base vs trained per suite with the difference and its standard error."""

import json

import pytest

from spade_jax.eval import __main__ as cli
from spade_jax.eval import compare, stats


def _summary(path, suites):
  path.write_text(json.dumps({"suites": {s.suite: s.to_json() for s in suites}}))
  return str(path)


def test_table_rows(tmp_path, capsys):
  base = _summary(tmp_path / "base.summary.json", [
      stats.Summary("humaneval", "pass@1", 0.50, 164, 0.03),
      stats.Summary("aime", "avg@k", 0.20, 30, 0.04)])
  trained = _summary(tmp_path / "trained.summary.json", [
      stats.Summary("humaneval", "pass@1", 0.55, 164, 0.04),
      stats.Summary("gpqa", "accuracy", 0.4, 198, 0.03)])
  cli.main(["compare", base, trained])
  rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
  assert rows["humaneval"].split()[2:] == ["50.00%", "55.00%", "+5.00", "5.00"]  # sqrt(3²+4²)
  assert "not comparable" in rows["aime"] and "not comparable" in rows["gpqa"]


def test_bad_summary_file(tmp_path):
  path = tmp_path / "x.json"
  path.write_text("[]")
  with pytest.raises(ValueError, match="'suites'"):
    compare.load_summary(path)
