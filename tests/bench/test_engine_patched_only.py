"""bench/engine_ab.py --patched-only on CPU, against the stand-in engine: the patched engine alone (issue 47's
Required 4 bounds its draft-extend host time; the pools of 128 x 64k and 32 x 128k are too big for two
engines' prefills in one call), its rows with its own measures and nothing compared, the refusals, and one
engine in the memory plan."""

from __future__ import annotations

import json

import pytest
from engine_runs import STAND_IN, run_bench  # noqa: E402  (this folder, as pytest puts it on the path)

from bench import engine_ab
from bench.engine import grid, report
from bench.engine.rows import PATCHED_ONLY_NOTE


def test_the_patched_engine_alone_gives_its_draft_extend_host_time_and_compares_nothing(tmp_path, capsys):
    status, doc = run_bench(tmp_path, "patched-only", "--patched-only", "--seed-case", "", "--next-n", "2")
    assert status == 0, doc["notes"]
    meta = doc["meta"]
    assert meta["engines"] == ["patched"] and meta["patched_only"] is True
    assert meta["patched_only_note"] == PATCHED_ONLY_NOTE and PATCHED_ONLY_NOTE in doc["notes"]
    assert meta["memory_plan"]["engines"] == 1
    # one engine started, and only it prefilled the pool
    assert [(e["tag"], e["label"]) for e in doc["engines"]] == [("n2", "patched")]
    assert [n for n in doc["notes"] if "prefilled" in n] == [
        n for n in doc["notes"] if n.startswith("next_n=2 patched")
    ]
    rows = doc["rows"]
    assert [(r["batch_size"], r["ctx"], r["lengths"]) for r in rows] == grid.GRIDS["targets"]
    for row in rows:
        assert row["patched_only"] is True and "pristine" not in row
        assert not [k for k in row if k.startswith(("speedup_", "aa_", "tokens_identical", "divergences"))]
        # the stand-in's patched draft-extend: a replayed graph, 1.5 ms of host time, 1.0 of GPU time
        extend = row["patched"]["parts"]["draft_extend"]
        assert (extend["host_ms"], extend["host_ms_max"], extend["gpu_ms"], extend["graph"]) == (1.5, 1.5, 1.0, 1.0)
        assert row["patched"]["tpot_ms"] and row["patched"]["step_interval_ms"] and row["accept_length"] == 1.0
        assert set(row["mem_gb"]) == {"patched"} and set(row["verify_samples"]) == {"patched"}
        recorded = row["positions_recorded"]
        assert recorded["verify_positions"] == row["batch_size"] * 2 * 6  # next_n 2, 6 new tokens, greedy
        assert recorded["draft_positions"] > 0 and recorded["draft_record_errors"] == []
    profiled = [r for r in rows if r["batch_size"] * r["ctx"] >= 32 * 16384]
    assert profiled and all(r["indexer_share"]["patched"]["share"] == pytest.approx(0.5) for r in profiled)
    lines = [line for line in capsys.readouterr().out.splitlines() if "patched engine alone" in line]
    assert len(lines) == len(rows)
    assert all("draft-extend host 1.50 ms median, 1.50 max" in line and "TPOT 1.00 ms" in line for line in lines)

    # the report: its own table, out of the tables that compare
    run_file = tmp_path / "patched-only" / "engine.json"
    combined = report.combined(report.load_runs([run_file]))
    text = report.markdown(combined)
    assert "verify us pristine -> patched" not in text and "Decode-step parts" not in text
    table = [line for line in text.splitlines() if line.startswith("| engine | v0.5.14 | bfloat16 | 2 | greedy |")]
    assert len(table) == len(rows) and all("| 1.50 / 1.50 | 1.00 | 1.00 |" in line for line in table)
    report.plot(combined, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").exists()


@pytest.mark.parametrize("other", [["--two-process-aa"], ["--seed-case", "3"]])
def test_patched_only_beside_options_that_need_pristine_is_refused(tmp_path, capsys, other):
    out = tmp_path / "engine.json"
    trees = ["--pristine", str(tmp_path / "pristine"), "--patched", str(tmp_path / "patched")]
    argv = [*trees, "--patched-only", *other, "--out", str(out), "--worker-script", str(STAND_IN)]
    assert engine_ab.main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert (
        line == f"engine_ab: --patched-only runs the patched engine alone; {other[0]} needs pristine engines beside it"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("grid_name", "prompts", "pool_tokens", "total_gib"),
    [("wide64k", 128, 8388608, 68.1), ("wide128k", 32, 4194304, 51.6), ("wide128k_64", 64, 8388608, 67.0)],
)
def test_one_engine_of_the_biggest_pools_fits_an_h100_where_two_do_not(
    tmp_path, capsys, grid_name, prompts, pool_tokens, total_gib
):
    pool = grid.pool_for(grid.GRIDS[grid_name])
    assert (len(pool), sum(r["prompt"][1] for r in pool)) == (prompts, pool_tokens)
    argv = [
        "--pristine",
        ".",
        "--patched",
        ".",
        "--out",
        str(tmp_path / "x.json"),
        "--next-n",
        "4",
        "--grid",
        grid_name,
    ]
    argv += [
        "--kv-cache",
        "fp8_e4m3",
        "--engine-arg",
        "sleep_on_idle=true",
        "--gpu-memory-gib",
        "79.2",
        "--check-memory",
    ]
    assert engine_ab.main([*argv, "--patched-only"]) == 0
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert (plan["engines"], plan["total_gib"], plan["fits"]) == (1, total_gib, True)
    assert engine_ab.main([*argv, "--seed-case", ""]) == 2
    assert "2 engines need about" in capsys.readouterr().err


def test_a_later_patched_only_run_of_a_case_leaves_the_compared_runs_point_in_the_plot(tmp_path, monkeypatch):
    """The plot shows the newest run of each case: a --patched-only row, which has no ratio to plot, is not
    that run, or the case's compared point would go."""
    import matplotlib.figure

    case = {"line": "v0.5.14", "next_n": 4, "ctx": 65536, "batch_size": 64, "lengths": "uniform"}
    compared = {**case, "speedup_verify": 1.2, "speedup_step_interval": 1.1, "run": "compared.json"}
    alone = {**case, "patched_only": True, "patched": {}, "run": "alone.json"}
    figures = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: figures.append(fig))
    report.plot({"runs": [], "rows": [compared, alone]}, tmp_path / "plot.png")
    [fig] = figures
    plotted = [list(line.get_ydata()) for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "o"]
    assert plotted == [[1.2], [1.1]]
