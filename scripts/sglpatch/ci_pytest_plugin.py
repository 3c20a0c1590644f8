"""A pytest plugin for the GPU leg: one record per test, with the pytest nodeid.

Loaded with `-p sglpatch.ci_pytest_plugin`; writes a JSON list to the file named by
$SGLPATCH_CI_RECORD when the session ends (only in the controlling process under
pytest-xdist: workers' reports reach it through the same hook). Each record:
{"nodeid", "outcome": passed|failed|skipped, "reason", "duration_s", "phase"}.

Modules skipped or broken at collection (e.g. `pytest.skip(..., allow_module_level=True)`
on the wrong GPU) have no test items; they are recorded under the module's nodeid, so a
reader can say why a required test is missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENV = "SGLPATCH_CI_RECORD"
_records: dict[str, dict] = {}


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text[len("Skipped: ") :] if text.startswith("Skipped: ") else text
    text = str(longrepr or "").strip()
    lines = text.splitlines()
    return lines[-1][:500] if lines else ""


def _record(nodeid: str, outcome: str, reason: str, duration: float, phase: str) -> None:
    entry = _records.setdefault(nodeid, {"nodeid": nodeid, "outcome": None, "reason": "", "duration_s": 0.0})
    entry["duration_s"] = round(entry["duration_s"] + duration, 3)
    rank = {None: 0, "skipped": 1, "passed": 2, "failed": 3}
    if rank[outcome] > rank[entry["outcome"]]:  # a failure anywhere wins; the first reason is kept
        entry.update(outcome=outcome, reason=reason, phase=phase)


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        outcome = {"passed": "passed", "failed": "failed", "skipped": "skipped"}[report.outcome]
        if hasattr(report, "wasxfail"):
            outcome, reason = ("skipped", f"xfail: {report.wasxfail}") if report.skipped else ("passed", "")
        else:
            reason = _reason(report) if outcome != "passed" else ""
        _record(report.nodeid, outcome, reason, report.duration, report.when)
    else:
        _record(report.nodeid, None, "", report.duration, report.when)


def pytest_collectreport(report):
    if report.outcome in ("skipped", "failed") and report.nodeid:
        _record(report.nodeid, report.outcome, _reason(report), 0.0, "collect")


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get(ENV)
    if not target or hasattr(session.config, "workerinput"):
        return
    records = []
    for entry in _records.values():
        if entry["outcome"] is None:  # setup passed, never called: interrupted
            entry.update(outcome="failed", reason="did not finish (session interrupted)")
        records.append(entry)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
