"""Fixtures for the reliability suites: the toolkit suite's real v0.5.14 trees, and the fault-grid summary.

The trees and the test series come from testing/sglang_trees.py, shared with the
toolkit suite. SGLPATCH_FAULT_GRID=full (set by
`make test-fault`) runs every write point; otherwise a fixed sample. Each grid
test records its figures; the terminal summary prints them.
"""

from __future__ import annotations

import json

from testing.fault_harness import GRID_PROPERTY
from testing.sglang_trees import *  # noqa: F401,F403  (fixtures are found by name)


def pytest_terminal_summary(terminalreporter):
    rows = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == GRID_PROPERTY and getattr(report, "when", "call") == "call":
                    rows.append(json.loads(value))
    if not rows:
        return
    rows.sort(key=lambda r: (r["operation"], r["target"], r["signal"]))
    write = terminalreporter.write_line
    mode = "full grid (every write point)" if rows[0]["full"] else "sample (SGLPATCH_FAULT_GRID=full for every point)"
    terminalreporter.section(f"fault grid: {mode}")
    write(
        f"{'operation':<10}{'target':<10}{'signal':<19}{'points':>7}{'tried':>7}{'left mid-way':>14}{'recovered':>11}"
    )
    for r in rows:
        write(
            f"{r['operation']:<10}{r['target']:<10}{r['signal']:<19}{r['points']:>7}{r['tried']:>7}"
            f"{r.get('mid_way', 0):>14}{r['recovered']:>11}"
        )
    tried, recovered = sum(r["tried"] for r in rows), sum(r["recovered"] for r in rows)
    mid_way = sum(r.get("mid_way", 0) for r in rows)
    ops, targets, sigs = ({r[k] for r in rows} for k in ("operation", "target", "signal"))
    write(
        f"total: {tried} interruptions tried, {recovered} recovered, {mid_way} of them from a half-written tree "
        f"({len(ops)} operations x {len(targets)} targets x {len(sigs)} signals; "
        f"{sum(r['points'] for r in rows) // max(1, len(sigs))} write points)"
    )
