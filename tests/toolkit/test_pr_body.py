"""PR bodies say what each GPU result ran, and time the indexer step from the patched code."""

from __future__ import annotations

import json

from sglpatch.lines import all_lines
from sglpatch.pr_body import Group, render_body
from sglpatch.project import PROJECT_ROOT, default_patch_dir
from sglpatch.series import load_series

SERIES = load_series(default_patch_dir())


def _group(**fields) -> Group:
    patches = [p for p in SERIES.patches if p.trailer("patch-group") == "sm90-dg-native"]
    return Group("sm90-dg-native", "title", "branch", patches, **fields)


def test_accuracy_notes_come_before_the_ci_summary():
    notes = ["What ran: the indexer.", "Not run: the attention."]
    body = render_body(_group(accuracy_notes=notes), PROJECT_ROOT, stack=[])
    accuracy = body.split("## Accuracy Tests", 1)[1].split("## Speed Tests", 1)[0]
    assert accuracy.index("What ran: the indexer.") < accuracy.index("Not run: the attention.")


def test_speed_table_from_the_indexer_step_benchmark():
    source = "docs/results/indexer_h200.json"
    body = render_body(_group(benchmark=source), PROJECT_ROOT, stack=[])
    speed = body.split("## Speed Tests and Profiling", 1)[1].split("## Checklist", 1)[0]
    data = json.loads((PROJECT_ROOT / source).read_text())
    graph_rows = [r for r in data["rows"] if r["cuda_graph"] and r["speedup"] and r["ctx"] == 65536]
    assert graph_rows
    for row in graph_rows:
        line = f"| {row['next_n']} | {row['lengths']} | {row['batch_size']} | {row['per_token_us']:.1f} | {row['layout']} |"
        assert line in speed
    assert "`Indexer._get_topk_paged`" in speed and source in speed


def test_project_groups_say_what_their_gpu_results_ran():
    """Every group a line sends upstream that cites GPU results says what ran there and what did not."""
    cited = 0
    for line in all_lines():
        data = json.loads((line.directory / "pr-groups.json").read_text())
        if data.get("backport"):
            continue
        for group in data["groups"]:
            if not (group.get("accuracy") or group.get("benchmark") or group.get("engine")):
                continue
            cited += 1
            notes = " ".join(group["accuracy_notes"])
            assert "What ran on an H200" in notes and "Not run on the GPU" in notes, (line.name, group["id"])
            if group["accuracy"]:  # it cites the GPU CI summary, which predates this revision
                assert "previous revision of this series" in notes
    assert cited


def _engine_row(line, next_n, bs, verify=(2000.0, 1600.0)):
    return {
        "run": "engine_h200_run9.json",
        "line": line,
        "next_n": next_n,
        "batch_size": bs,
        "ctx": 65536,
        "lengths": "uniform",
        "speedup_verify": verify[0] / verify[1],
        "tokens_identical": 1.0,
        "pristine": {"verify_step_us": verify[0], "step_interval_ms": 8.0},
        "patched": {"verify_step_us": verify[1], "step_interval_ms": 7.5},
        "speedup_step_interval": 8.0 / 7.5,
        "aa_noise": {"verify": 1.004},
        "indexer_share": {"pristine": {"share": 0.25}, "patched": {"share": 0.12}},
    }


def test_speed_section_cites_the_engine_rows_of_its_line_first(tmp_path):
    run = {
        "run": "engine_h200_run9.json",
        "line": "v0.5.14",
        "parallel": "tp1",
        "command": "bash ci/run_engine_gpu.sh",
        "versions": {"gpu": "NVIDIA H200", "torch": "2.11.0", "sgl-deep-gemm": "0.1.5.post1", "sglang-kernel": "0.4.4"},
        "series": [{"name": "0001-x.patch", "sha256": "abc"}],
    }
    rows = [_engine_row("v0.5.14", 4, 32), _engine_row("v0.5.14", 3, 32), _engine_row("v0.5.23", 4, 32)]
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": rows}))
    group = _group(
        engine={"file": "engine.json", "line": "v0.5.14", "next_n": [4]}, speed_notes=["Indexer alone: see x."]
    )
    speed = render_body(group, tmp_path, stack=[]).split("## Speed Tests and Profiling", 1)[1].split("## Checklist")[0]
    table = [line for line in speed.splitlines() if line.startswith("| 4 |") or line.startswith("| 3 |")]
    assert table == [
        "| 4 | 32 | 64k | uniform | 2000 -> 1600 | 1.250 | 1.004 | 8.00 -> 7.50 | 1.067 | 25% / 12% | 1.0 |"
    ]
    assert "torch 2.11.0, sgl-deep-gemm 0.1.5.post1, sglang-kernel 0.4.4" in speed
    assert speed.index("sglang's own `Engine`") < speed.index("Indexer alone: see x.")


def test_an_engine_citation_can_name_its_runs(tmp_path):
    runs = [
        {"run": name, "line": "v0.5.14", "parallel": "tp1", "versions": {}, "series": []}
        for name in ("engine_h200_run1.json", "engine_h200_run9.json")
    ]
    rows = [{**_engine_row("v0.5.14", 2, 32), "run": "engine_h200_run1.json"}, _engine_row("v0.5.14", 2, 64)]
    (tmp_path / "engine.json").write_text(json.dumps({"runs": runs, "rows": rows}))
    group = _group(engine={"file": "engine.json", "runs": ["engine_h200_run9.json"]})
    speed = render_body(group, tmp_path, stack=[]).split("## Speed Tests and Profiling", 1)[1]
    assert [line[:10] for line in speed.splitlines() if line.startswith("| 2 |")] == ["| 2 | 64 |"]
    assert "engine_h200_run1.json" not in speed


def test_speed_notes_of_an_engine_run_come_between_its_table_and_the_indexer_step(tmp_path):
    run = {"run": "engine_h200_run9.json", "line": "v0.5.14", "parallel": "tp1", "versions": {}, "series": []}
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": [_engine_row("v0.5.14", 4, 32)]}))
    source = PROJECT_ROOT / "docs/results/indexer_h200.json"
    (tmp_path / "indexer.json").write_text(source.read_text())
    group = _group(
        engine={"file": "engine.json", "line": "v0.5.14"},
        benchmark="indexer.json",
        speed_notes=["The engine ran on the other line."],
    )
    speed = render_body(group, tmp_path, stack=[]).split("## Speed Tests and Profiling", 1)[1].split("## Checklist")[0]
    order = [
        speed.index(x) for x in ("| 4 | 32 | 64k |", "The engine ran on the other line.", "The indexer step alone")
    ]
    assert order == sorted(order), order


def test_an_engine_run_past_the_version_check_says_so_in_the_body(tmp_path):
    run = {
        "run": "engine_h200_v0_5_23_run9.json",
        "line": "v0.5.23",
        "parallel": "tp1",
        "versions": {},
        "series": [],
        "sgl_kernel_version_check_skipped": True,
    }
    row = {**_engine_row("v0.5.23", 2, 32), "run": run["run"]}
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": [row]}))
    group = _group(engine={"file": "engine.json", "line": "v0.5.23"})
    speed = render_body(group, tmp_path, stack=[]).split("## Speed Tests and Profiling", 1)[1]
    [listed] = [line for line in speed.splitlines() if line.startswith("- `engine_h200_v0_5_23_run9.json`")]
    assert "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1" in listed
