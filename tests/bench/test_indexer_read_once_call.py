"""What the GPU call of the indexer step with the read-once DeepGEMM runs, checked without a GPU: the engine's
64k grid, its fixture and plan, ci/run_indexer_gpu_v0_5_23.sh's --pages, and the GPU test's two runs (pristine,
patched) handed the same --pages, from tests/gpu/indexer_runs.py, with a stand-in for bench/indexer_step.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import indexer_step
from bench.indexer import grids

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))

import indexer_runs  # noqa: E402

RUNNER = REPO / "ci" / "run_indexer_gpu_v0_5_23.sh"

# Writes the JSON a run reads back, with the arguments it was given.
STAND_IN_BENCH = """
import json, sys
args = sys.argv[1:]
json_path = args[args.index("--json") + 1]
open(json_path, "w").write(json.dumps({"argv": args}))
"""


def test_engine64k_is_the_engines_64k_cases_at_next_n_3_to_6():
    cases = grids.grid_cases(["engine64k"])
    assert len(cases) == 4 * 2 * 2
    assert {c[0] for c in cases} == {3, 4, 5, 6} and {c[1] for c in cases} == {32, 128}
    assert {c[2] for c in cases} == {65536} and {c[3] for c in cases} == {"uniform", "ragged"}
    assert grids.fixture_size(cases) == (128, 65536)


def test_the_plan_names_the_fixture_and_its_pages(capsys):
    assert indexer_step.main(["--grid", "engine64k", "--pages", "contiguous", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "16 cases x 2 mode(s) (engine64k)" in out
    assert "fixture: 128 requests x 65536 tokens, pages contiguous" in out


def test_the_runner_refuses_pages_it_does_not_know_before_making_anything(tmp_path):
    assert subprocess.run(["bash", "-n", str(RUNNER)]).returncode == 0
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(RUNNER), "--pages", "sideways", "--out", str(out), "--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.strip() == "--pages takes random or contiguous, not 'sideways'"
    assert not out.exists() and not (tmp_path / "work").exists()


def test_both_runs_get_the_same_pages_and_the_command_says_so(tmp_path, monkeypatch):
    bench = tmp_path / "indexer_step.py"
    bench.write_text(STAND_IN_BENCH)
    monkeypatch.setattr(indexer_runs, "BENCH", bench)
    monkeypatch.setenv("SGLPATCH_INDEXER_PAGES", "contiguous")
    monkeypatch.setenv("SGLPATCH_INDEXER_GRID", "engine64k")
    monkeypatch.delenv("SGLPATCH_INDEXER_JSON", raising=False)
    monkeypatch.delenv("SGLPATCH_RUN_COMMAND", raising=False)
    runs = indexer_runs.run_pristine_then_patched(tmp_path, tmp_path / "p", tmp_path / "t", "out.json", "test_x.py")
    for doc in (runs["pristine"], runs["doc"]):
        argv = doc["argv"]
        assert argv[argv.index("--pages") + 1] == "contiguous" and argv[argv.index("--grid") + 1] == "engine64k"
    command = runs["doc"]["argv"][runs["doc"]["argv"].index("--command") + 1]
    assert "--grid engine64k --pages contiguous --compare-topk" in command


def test_without_the_variable_the_runs_take_the_benchs_default_random_pages(monkeypatch, capsys):
    monkeypatch.delenv("SGLPATCH_INDEXER_PAGES", raising=False)
    assert indexer_runs.fixture_options() == []
    assert indexer_step.main(["--grid", "engine64k", "--plan"]) == 0
    assert "fixture: 128 requests x 65536 tokens, pages random" in capsys.readouterr().out
