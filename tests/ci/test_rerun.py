"""`sglpatch rerun` and rerun_comment_lines: touched paths -> upstream tests -> PR comment lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglpatch.cli import main
from sglpatch.errors import FatalError
from sglpatch.lines import default_patch_dir
from sglpatch.series import FileDiff, Patch, load_series
from sglpatch.upstream.pr_groups import group_patches
from sglpatch.upstream.rerun import (
    default_map_path,
    load_rerun_map,
    local_commands,
    plan_reruns,
    rerun_comment_lines,
)

TEST_DSA = "test/registered/attention/unittests/dsa/test_dsa.py"
EAGLE_BETA = "test/registered/spec/eagle/test_eagle_infer_beta.py"
DSA_MTP = "test/registered/8-gpu-models/test_dsa_models_mtp.py"
SM90_PAGED_MQA = "test/registered/attention/unittests/dsa/test_dsa_sm90_paged_mqa.py"
DRAFT_EXTEND_GRAPH = "test/registered/attention/unittests/dsa/test_dsa_draft_extend_cuda_graph.py"


@pytest.fixture(scope="module")
def series():
    return load_series(default_patch_dir())


@pytest.fixture(scope="module")
def rerun_map():
    return load_rerun_map()


def fake_patch(name: str, paths: list[str], group: str | None = None) -> Patch:
    trailers = {"patch-group": group} if group else {}
    return Patch(name, Path(name), b"", "a", "d", "s", "", trailers, [FileDiff(p, p) for p in paths])


def test_every_touched_file_of_the_series_maps_to_an_upstream_test(series, rerun_map):
    assert series.touched_paths  # every file the real series touches
    for path in series.touched_paths:
        tests = rerun_map.tests_for(path)
        assert tests, f"{path} maps to no upstream test"
        for test in tests:
            assert rerun_map.tests[test]["runner_configs"]
    assert plan_reruns(series.patches, rerun_map).unmapped == []


def test_groups_keep_series_order(series):
    groups = group_patches(series.patches)
    assert [g for g, _ in groups] == ["sm90-dg-native", "mtp-indexshare-seed", "dsa-draft-extend-graph"]
    assert [[p.name[:4] for p in ps] for _, ps in groups] == [["0001", "0002"], ["0003", "0004"], ["0005", "0006"]]


def test_comment_lines_per_group(series, rerun_map):
    (_, dsa), (_, seed), (_, draft_extend) = group_patches(series.patches)
    assert rerun_comment_lines(dsa, rerun_map=rerun_map) == [
        "/tag-run-ci-label",
        f"/rerun-test {TEST_DSA}",
        f"/rerun-test {SM90_PAGED_MQA}",
        f"/rerun-test {DSA_MTP}",
    ]
    # the one-GPU jobs in the order the group's files first name them, then the 8-GPU one
    assert rerun_comment_lines(seed, rerun_map=rerun_map) == [
        "/tag-run-ci-label",
        f"/rerun-test {EAGLE_BETA}",
        f"/rerun-test {TEST_DSA}",
        f"/rerun-test {DSA_MTP}",
    ]
    # the draft-extend graph group runs the test it adds to sglang's tree too (not another group's)
    assert rerun_comment_lines(draft_extend, rerun_map=rerun_map) == [
        "/tag-run-ci-label",
        f"/rerun-test {TEST_DSA}",
        f"/rerun-test {EAGLE_BETA}",
        f"/rerun-test {DRAFT_EXTEND_GRAPH}",
        f"/rerun-test {DSA_MTP}",
    ]


def test_label_and_failed_ci_lines(series):
    dsa = group_patches(series.patches)[0][1]
    assert rerun_comment_lines(dsa, labeled=True)[0] == f"/rerun-test {TEST_DSA}"
    assert rerun_comment_lines(dsa, labeled=True, ci_failed=True)[:2] == ["/rerun-failed-ci", f"/rerun-test {TEST_DSA}"]


def test_unknown_paths_are_reported(rerun_map):
    patches = [
        fake_patch("0001-x.patch", ["python/sglang/srt/layers/attention/dsa_backend.py", "python/sglang/srt/x/new.py"])
    ]
    plan = plan_reruns(patches, rerun_map)
    assert plan.unmapped == ["python/sglang/srt/x/new.py"]
    # a test a series adds maps only from its own path: dsa_backend.py alone names upstream's tests
    assert plan.tests == [TEST_DSA, DSA_MTP]
    with pytest.raises(FatalError, match="no upstream test is mapped for python/sglang/srt/x/new.py"):
        rerun_comment_lines(patches, rerun_map=rerun_map)


def test_patches_without_a_group_stand_alone():
    patches = [
        fake_patch("0001-a.patch", ["p"], "g"),
        fake_patch("0002-b.patch", ["p"]),
        fake_patch("0003-c.patch", ["p"], "g"),
    ]
    assert [(g, [p.name for p in ps]) for g, ps in group_patches(patches)] == [
        ("g", ["0001-a.patch", "0003-c.patch"]),
        ("0002-b", ["0002-b.patch"]),
    ]


def test_local_commands(rerun_map):
    assert local_commands([TEST_DSA, DSA_MTP], rerun_map, "/src/sglang") == [
        "make ci-gpu SGLANG=/src/sglang",
        "(cd /src/sglang/test && python3 registered/attention/unittests/dsa/test_dsa.py -f)",
        "(cd /src/sglang/test && python3 registered/8-gpu-models/test_dsa_models_mtp.py -f)"
        "  # needs 8 GPUs (8-gpu-h200)",
    ]


def test_rerun_command_prints_every_group(capsys):
    assert main(["rerun", "--line", "v0.5.14", "--sglang", "/src/sglang"]) == 0
    out = capsys.readouterr().out.splitlines()
    headers = [line for line in out if line.startswith("== ")]
    assert headers == [
        "== PR 1/3: sm90-dg-native (patches 0001, 0002; extends #27166)",
        "== PR 2/3: mtp-indexshare-seed (patches 0003, 0004; upstream #29787)",
        "== PR 3/3: dsa-draft-extend-graph (patches 0005, 0006; upstream #29413, #29787)",
    ]
    assert out.count("/tag-run-ci-label") == 3  # one per group
    assert "local: make ci-gpu SGLANG=/src/sglang" in out


def test_rerun_command_reports_unmapped_paths(tmp_path, capsys):
    data = json.loads(default_map_path().read_text())
    data["rules"] = [r for r in data["rules"] if "overlap_utils" not in r["glob"]]
    reduced = tmp_path / "map.json"
    reduced.write_text(json.dumps(data))
    assert main(["rerun", "--line", "v0.5.14", "--map", str(reduced)]) == 2
    captured = capsys.readouterr()
    assert "unmapped: python/sglang/srt/managers/overlap_utils.py" in captured.err
    assert "== PR 1/3: sm90-dg-native" in captured.out  # the mapped group is still printed


def test_map_rejects_a_rule_naming_an_unknown_test(tmp_path):
    data = json.loads(default_map_path().read_text())
    data["rules"][0]["tests"].append("test/registered/nowhere/test_x.py")
    bad = tmp_path / "map.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(FatalError, match="names test/registered/nowhere/test_x.py, which upstream_tests lacks"):
        load_rerun_map(bad)
