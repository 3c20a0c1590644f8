"""The committed engine results read through today's code: each run's rows and report lines come out
as they were committed (docs/results/engine_h200.{json,md}, written by `make engine-report`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.engine import report

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
# the newest engine runs of each line (2 Dec 2026): 64 and 128 requests x 16k, three engines, FP8 KV
NEWEST = ("engine_h200_tpot_wide.json", "engine_h200_tpot_v0_5_23_wide.json")


@pytest.fixture(scope="module")
def committed():
    return json.loads((RESULTS / "engine_h200.json").read_text()), (RESULTS / "engine_h200.md").read_text()


@pytest.mark.parametrize("name", NEWEST)
def test_a_committed_run_gives_its_committed_rows(committed, name):
    doc = report.combined(report.load_runs([RESULTS / name]))
    combined, _ = committed
    assert doc["rows"] == [row for row in combined["rows"] if row["run"] == name]
    assert doc["runs"] == [run for run in combined["runs"] if run["run"] == name]


@pytest.mark.parametrize("name", NEWEST)
def test_a_committed_run_gives_its_committed_report_lines(committed, name):
    lines = report.markdown(report.combined(report.load_runs([RESULTS / name]))).splitlines()
    _, markdown = committed
    # every line: the run's own line and notes, the tables' heads, per row one line in each of three tables
    assert [line for line in lines if line not in set(markdown.splitlines())] == []
    rows = json.loads((RESULTS / name).read_text())["rows"]
    assert len([line for line in lines if line.startswith(f"| {report._run_name(name)} |")]) == 3 * len(rows)


def test_a_run_on_the_source_build_names_it_not_the_wheel_behind_it():
    name = "engine_h200_v0_5_23_n2_pairs_source.json"
    doc = report.combined(report.load_runs([RESULTS / name]))
    (line,) = [line for line in report.markdown(doc).splitlines() if line.startswith(f"- **{name}**")]
    assert "DeepGEMM built from deepseek-ai/DeepGEMM 54e2261 (line deep_gemm/54e2261, 1 of its patches)" in line
    assert "sgl-deep-gemm" not in line


def test_the_old_window_shows_no_tokens_per_s_and_the_new_one_does():
    """Rows before 6 Dec 2026 began the fixed window at a run's earliest first token (A/A 1.30 at 32 x 64k on
    the H200): the report leaves their tokens/s out rather than print a rate known to be wrong."""
    old = json.loads((RESULTS / "engine_h200_floor64k_same_layout.json").read_text())["rows"][0]
    new = {**old, "window_from": "every request decoding, chunks spread over their gaps"}
    aa = old["aa_noise_processes"]
    assert report._window_rate(old, aa) == "- (old window) | - (-)"
    assert report._window_rate(new, aa) == "1264 -> 2311 | 1.828 (1.301)"
