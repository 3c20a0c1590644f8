"""PR bodies say what each GPU result ran, and time the indexer step from the patched code."""

from __future__ import annotations

import json

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
    groups = json.loads((default_patch_dir() / "pr-groups.json").read_text())["groups"]
    for group in groups:
        notes = " ".join(group["accuracy_notes"])
        assert "What ran on an H200" in notes and "Not run on the GPU" in notes
        if group["accuracy"]:  # it cites the GPU CI summary, which predates this revision
            assert "previous revision of this series" in notes
