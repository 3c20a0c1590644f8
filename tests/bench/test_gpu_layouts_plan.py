"""The plan of ci/run_gpu_layouts.sh, checked without a GPU: its grids, their cases, the runner's arguments."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench import indexer_step
from bench.indexer import grids
from sglpatch.wheels import cache_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "run_gpu_layouts.sh"


def test_holdout_grid_is_the_issues():
    g = grids.GRIDS["holdout"]
    assert g["batch_sizes"] == (2, 6, 12, 16, 24, 48, 96)
    assert g["ctxs"] == (2048, 8192, 32768, 131072)
    assert set(g["next_ns"]) == {2, 3, 4, 5, 6} and set(g["lengths"]) == {"uniform", "ragged"}
    # none of its (batch size, context) cases is in a committed grid the rule was fitted on
    # (kernel grid: B 1-128, ctx 4k/16k/64k; indexer grids: B 1-128, ctx 4k/16k/64k)
    fitted_ctxs = {4096, 16384, 65536}
    assert not set(g["ctxs"]) & fitted_ctxs


def test_cases_are_counted_once_and_keep_their_grids():
    cases = grids.grid_cases(["holdout", "odd", "identity"])
    assert len(cases) == 280 + 36  # identity is a subset of the hold-out grid
    assert cases[(3, 48, 8192, "ragged")] == ["holdout", "identity"]
    assert cases[(5, 128, 65536, "uniform")] == ["odd"]
    assert all(n == 6 or n % 2 for n, *_ in grids.grid_cases(["odd"]))


def test_estimate_grows_with_the_work():
    small = grids.estimate_s([(2, 2, 2048, "ragged")], (True,), 10, 5, True)
    large = grids.estimate_s([(6, 96, 131072, "uniform")], (True,), 10, 5, True)
    assert 0 < small < large


def test_runner_refuses_a_bad_budget_and_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    done = subprocess.run(["bash", str(SCRIPT), "--budget", "soon"], capture_output=True, text=True)
    assert done.returncode == 2 and "--budget takes whole seconds" in done.stderr
    done = subprocess.run(["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown argument" in done.stderr


def test_a_call_for_one_line_reports_only_that_lines_run(tmp_path):
    """The H200, 4 Dec 2026: `--lines v0.5.23` passed every criterion and still reported a failure, since the
    report also asked for v0.5.14's hold-out JSON, which that call was never to write."""
    if not list((cache_dir() / "wheels").glob("sglang-0.5.23-*.whl")):
        pytest.skip("the rehearsal lays its trees out from sglang 0.5.23's wheel: run make apply LINE=v0.5.23 once")
    out = tmp_path / "out"
    # a box that has an H100 where the call asked for an H200: the run's JSON is named for the card it ran on
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    done = subprocess.run(
        ["bash", str(SCRIPT), "--rehearse", "--lines", "v0.5.23", "--out", out, "--work", tmp_path / "work"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"},
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["missing_runs"] == [str(out / "indexer_holdout_h100_v0_5_23.json")], done.stdout[-2000:]


def _planned_fixture(capsys, *args):
    assert indexer_step.main([*args, "--plan"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "fixture:" in x]
    return line.split("fixture:")[1].split(", pages")[0].strip()


def test_pristine_and_holdout_parts_build_the_same_fixture(capsys):
    # The H200 run's pristine part built its fixture for its own grid (48 x 8192) and the hold-out
    # part for its grids (128 x 131072): the pristine top-k (KV slots) could not match. The
    # pristine part now sizes its fixture for the hold-out grids, the grids the hold-out part runs.
    text = SCRIPT.read_text()
    pristine = next(x for x in text.splitlines() if "--dump-topk" in x)
    holdout = next(x for x in text.splitlines() if 'part "holdout-$1"' in x)
    assert '--fixture-grid "$HOLDOUT_GRIDS"' in pristine and 'patched "$HOLDOUT_GRIDS"' in holdout
    grids = next(x for x in text.splitlines() if x.startswith("HOLDOUT_GRIDS=")).split("=", 1)[1]
    ours = _planned_fixture(capsys, "--grid", "identity", "--fixture-grid", grids, "--label", "pristine")
    theirs = _planned_fixture(capsys, "--grid", grids)
    assert ours == theirs == "128 requests x 131072 tokens"
    assert _planned_fixture(capsys, "--grid", "identity") == "48 requests x 8192 tokens"  # what it was
