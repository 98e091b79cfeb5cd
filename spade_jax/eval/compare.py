"""The comparison table of two summary files (base vs trained), as the paper reports it.

The difference's standard error treats the two runs as independent samples:
sqrt(se_a^2 + se_b^2).
"""

from __future__ import annotations

import json
import math

from spade_jax import storage


def load_summary(path) -> dict[str, dict]:
  data = json.loads(storage.read_text(path))  # a local file or gs://
  suites = data.get("suites") if isinstance(data, dict) else None
  if not isinstance(suites, dict):
    raise ValueError(f"{path}: expected a summary JSON with a 'suites' object")
  return suites


def table(a: dict[str, dict], b: dict[str, dict], names=("A", "B")) -> str:
  """Rows for every suite in both runs (same metric), then suites only one run has."""
  head = f"{'suite':<22} {'metric':<10} {names[0]:>10} {names[1]:>10} {'diff':>9} {'± se':>8}"
  rows = [head, "-" * len(head)]
  for suite in sorted(set(a) | set(b)):
    x, y = a.get(suite), b.get(suite)
    if x is None or y is None or x["metric"] != y["metric"]:
      rows.append(f"{suite:<22} (not comparable: only one run has it, or metrics differ)")
      continue
    diff = y["value"] - x["value"]
    err = math.sqrt(x["stderr"] ** 2 + y["stderr"] ** 2)
    rows.append(f"{suite:<22} {x['metric']:<10} {100 * x['value']:>9.2f}% "
                f"{100 * y['value']:>9.2f}% {100 * diff:>+8.2f} {100 * err:>8.2f}")
  return "\n".join(rows)
