"""bench/layouts_report.py: the criteria of issues 22 and 23, on made-up runs shaped like bench/indexer_step.py's."""

from __future__ import annotations

import json

import pytest

from bench import layouts_report
from sglpatch.project import PROJECT_ROOT as ROOT


def row(next_n, bs, ctx, layout, speedup, grids=("holdout",), **extra):
    base = dict(
        next_n=next_n,
        batch_size=bs,
        ctx=ctx,
        lengths="ragged",
        cuda_graph=True,
        layout=layout,
        speedup=speedup,
        topk_equivalent=True,
        topk_identical=True,
        logits_bit_identical=True,
        grids=list(grids),
        compared_with=["per_token", "chosen"],
        mismatch_rows={"chosen": 0},
    )
    return base | extra


SELF_CHECK = dict(detected=True, result=dict(mismatch_rows=1))


def doc(rows, self_check=SELF_CHECK):
    return dict(
        sglang="0.5.23",
        device="H200",
        deep_gemm="0.1.5.post1",
        rows=rows,
        partial=False,
        grid="holdout,odd",
        comparison_self_check=self_check,
    )


def checks(rows, **kw):
    return {c["criterion"].split(":")[0]: c["status"] for c in layouts_report.line_report(doc(rows, **kw))["checks"]}


def good_rows():
    return [
        row(2, 16, 2048, "native", 1.01),
        row(2, 2, 2048, "per_token", 0.95),  # per-token vs per-token: noise, not a criterion
        row(3, 48, 131072, "per_token", 1.0),
        row(3, 64, 65536, "per_token", 0.99, grids=("odd",)),
        row(5, 32, 65536, "per_token", 1.01, grids=("odd",)),
        row(
            4,
            16,
            8192,
            "paired",
            1.1,
            compared_with=["per_token", "chosen", "pristine"],
            mismatch_rows={"chosen": 0, "pristine": 0},
        ),
    ]


def test_a_run_that_meets_every_criterion():
    got = checks(good_rows())
    assert set(got.values()) == {"pass"}, got


def test_a_two_token_row_below_097_fails_the_holdout():
    rows = good_rows() + [row(6, 6, 2048, "paired", 0.96)]
    assert checks(rows)["holdout"] == "FAIL"


def test_odd_next_n_must_stay_per_token():
    # the series carries no odd-next_n path: a row that took one (as the H200 run's pair_tail rows
    # did) fails, whatever its speed
    rows = good_rows() + [row(3, 96, 65536, "pair_tail", 1.3, grids=("odd",))]
    assert checks(rows)["odd next_n"] == "FAIL"
    assert checks([r for r in good_rows() if r["next_n"] % 2 == 0])["odd next_n"] == "no rows"


def test_the_self_check_must_have_caught_a_perturbed_row():
    # the H200 hold-out runs: the check found no key to swap in, so it never ran
    assert checks(good_rows(), self_check=dict(detected=False, reason="no slot to swap in"))["self-check"] == "FAIL"
    assert checks(good_rows(), self_check=None)["self-check"] == "no rows"


def test_topk_logits_and_identity():
    rows = good_rows()
    rows[0] = dict(rows[0], topk_equivalent=False, topk_identical=False)
    rows[5] = dict(rows[5], logits_bit_identical=False, mismatch_rows={"chosen": 0, "pristine": 3})
    got = checks(rows)
    assert got["top-k"] == got["logits"] == got["identity"] == "FAIL"


def test_command_writes_the_summary_and_fails_on_a_missing_run(tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(json.dumps(doc(good_rows())))
    parts = tmp_path / "parts.tsv"
    parts.write_text("holdout-v0.5.23\t0\t80\nholdout-v0.5.14\t124\t200\n")
    assert layouts_report.main([str(run), "--parts", str(parts), "--summary", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["ok"] and summary["parts"][1] == dict(part="holdout-v0.5.14", exit_status="124", wall_s=200.0)
    assert "part holdout-v0.5.14: exit 124" in capsys.readouterr().out
    assert layouts_report.main([str(run), str(tmp_path / "absent.json")]) == 1


@pytest.mark.parametrize("run, status", [("", 0), ("_run1", 1)])  # run 1 failed criteria, run 2 passed them
def test_the_picture_of_the_committed_holdout_runs_is_drawn(tmp_path, run, status):
    import matplotlib.image

    names = (f"indexer_holdout_h200{run}.json", f"indexer_holdout_h200_v0_5_23{run}.json")
    runs = [str(ROOT / "docs/results" / name) for name in names]
    png = tmp_path / "holdout.png"
    assert layouts_report.main([*runs, "--png", str(png)]) == status  # as measured
    height, width, _ = matplotlib.image.imread(png).shape
    assert width > 2 * height > 600  # one panel per line, side by side
