"""The committed H200 rows the SM90 row-width rule is checked against, in both lines' CPU tests.

- ``fitted_rows()``: every row the rule was fitted on, with what a capture of it knows
  (bench/layout_rule.py's ``committed_rows``: the kernel grid and the CUDA-graph two-token rows of the
  three indexer-step runs);
- ``check_holdout_choices(rule, name)``: the hold-out grid ``name`` (one of ``HOLDOUT_RUNS``: two runs per
  line, both measured after the rule was fixed), against the rule of the line under test.
"""

from __future__ import annotations

import json

from bench.layout_rule import RESULTS, committed_rows

# run 1 (main at f45294f) ran odd next_n as pairs plus a tail; run 2 one token per row; v0.5.23's run 3
# the series with its rule as a threshold and one DeepGEMM call per forward on SM90
ODD_LAYOUTS = {
    "indexer_holdout_h200_run1.json": {"per_token", "pair_tail"},
    "indexer_holdout_h200_v0_5_23_run1.json": {"per_token", "pair_tail"},
    "indexer_holdout_h200.json": {"per_token"},
    "indexer_holdout_h200_v0_5_23_run2.json": {"per_token"},
    "indexer_holdout_h200_v0_5_23.json": {"per_token"},
}
HOLDOUT_RUNS = tuple(ODD_LAYOUTS)


def fitted_rows() -> list[dict]:
    return committed_rows(RESULTS)


def check_holdout_choices(rule, name: str, num_sms: int = 132) -> None:
    """For even next_n, ``rule(next_n, batch_size, width, num_sms)`` still gives the tokens per row the
    hold-out ran (it is not refitted on the hold-out); odd next_n, which ran pairs plus a tail in run 1,
    is one token per row now. A rule that reads fewer inputs takes and ignores the rest."""
    rows = json.loads((RESULTS / name).read_text())["rows"]
    even = [r for r in rows if r["next_n"] % 2 == 0]
    assert len(even) == 180, len(even)
    for r in even:
        want = 1 if r["layout"] == "per_token" else 2
        assert rule(r["next_n"], r["batch_size"], r["block_table_width"], num_sms) == want, r
    odd = [r for r in rows if r["next_n"] % 2]
    assert {r["layout"] for r in odd} == ODD_LAYOUTS[name], {r["layout"] for r in odd}
    assert all(rule(r["next_n"], r["batch_size"], r["block_table_width"], num_sms) == 1 for r in odd)
