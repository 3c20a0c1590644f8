"""The GPU leg's summary: loading, and the check that fails a leg (ci/leg-expectations.json).

The fixtures in data/ are shaped as ci/gpu_leg.py writes them; their dsa-kit records come from
the real H200 run of the patched tree (docs/ci/dsa_kit_patched_h200.json).
"""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglpatch.cli import main
from sglpatch.errors import FatalError
from sglpatch.gpu import ci_summary

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
KIT = "ci/dsa_kit_driver.py::"
LAYOUTS = "tests/gpu/test_paged_mqa_layouts.py::"


@pytest.fixture(scope="module")
def expectations():
    return ci_summary.load_expectations()


def load(name: str) -> dict:
    return ci_summary.load_leg_summary(DATA / name)


def write(tmp_path: Path, summary: dict) -> Path:
    path = tmp_path / "leg.json"
    path.write_text(json.dumps(summary))
    return path


def set_outcome(summary: dict, nodeid: str, outcome: str, reason: str = "") -> None:
    hits = [t for t in summary["tests"] if t["nodeid"] == nodeid]
    assert hits, nodeid
    hits[0].update(outcome=outcome, reason=reason)


# -- good legs pass ---------------------------------------------------------------------


def test_good_h100_leg_passes(expectations):
    summary = load("leg_h100_good.json")
    assert ci_summary.check_leg(summary, "h100", expectations) == []
    assert ci_summary.gpu_tests_ran(summary) == 44


def test_good_b200_leg_passes_with_the_sm90_module_skipped(expectations):
    summary = load("leg_b200_good.json")
    assert any(t["nodeid"] == "tests/gpu/test_paged_mqa_layouts.py" for t in summary["tests"])
    assert ci_summary.check_leg(summary, "b200", expectations) == []


# -- bad legs fail ----------------------------------------------------------------------


def test_leg_with_only_skips_fails(expectations):
    """A runner without a usable GPU: every test skipped; the leg must not look green."""
    summary = load("leg_h100_good.json")
    summary["environment"].update(gpu=None, compute_capability=None)
    for test in summary["tests"]:
        test.update(outcome="skipped", reason="CUDA is required")
    problems = ci_summary.check_leg(summary, "h100", expectations)
    assert "no CUDA GPU was visible to the leg (environment.gpu is null)" in problems
    assert any(p.startswith("no GPU test ran") for p in problems)
    assert any(
        p.startswith(f"required test skipped: {KIT}test_target_verify_eight_requests[bs8-next_n4]") for p in problems
    )


def test_leg_on_a_gpu_whose_tests_all_skipped_fails(expectations):
    """GPU present, but e.g. DeepGEMM missing: still no GPU test ran."""
    summary = load("leg_b200_good.json")
    for test in summary["tests"]:
        test.update(outcome="skipped", reason="deep_gemm is not importable")
    problems = ci_summary.check_leg(summary, "b200", expectations)
    assert problems[0].startswith("no GPU test ran")


def test_leg_with_no_tests_at_all_fails(expectations):
    summary = load("leg_h100_good.json")
    summary["tests"] = []
    problems = ci_summary.check_leg(summary, "h100", expectations)
    assert "no GPU test ran: 0 collected, all skipped or none at all" in problems
    assert sum(p.startswith("required test missing") for p in problems) == 25  # all but the upstream one


def test_leg_missing_a_required_test_fails(expectations):
    summary = load("leg_h100_good.json")
    gone = f"{KIT}test_target_verify_eight_requests[bs8-next_n4]"
    summary["tests"] = [t for t in summary["tests"] if t["nodeid"] != gone]
    assert ci_summary.check_leg(summary, "h100", expectations) == [f"required test missing: {gone}"]


def test_required_test_skipped_fails(expectations):
    summary = load("leg_h100_good.json")
    nodeid = f"{LAYOUTS}test_paired_matches_per_token[32-6000-4]"
    set_outcome(summary, nodeid, "skipped", "deep_gemm is not importable: ImportError")
    assert ci_summary.check_leg(summary, "h100", expectations) == [
        f"required test skipped: {nodeid}: deep_gemm is not importable: ImportError"
    ]


def test_any_failed_test_fails_the_leg(expectations):
    summary = load("leg_h100_good.json")
    nodeid = f"{KIT}test_sparse_case[dsa_sparse_decode_long_prefix]"  # not a required test
    set_outcome(summary, nodeid, "failed", "AssertionError: Tensor-likes are not close!")
    assert ci_summary.check_leg(summary, "h100", expectations) == [
        f"failed: {nodeid}: AssertionError: Tensor-likes are not close!"
    ]


def test_known_failure_is_tolerated_unless_required(expectations):
    exp = copy.deepcopy(expectations)
    summary = load("leg_h100_good.json")
    optional = f"{KIT}test_sparse_case[dsa_sparse_decode_long_prefix]"
    required = f"{KIT}test_draft_extend_v2"
    exp["legs"]["h100"]["known_failures"] = [{"nodeid": optional, "why": "x"}, {"nodeid": required, "why": "y"}]
    set_outcome(summary, optional, "failed", "boom")
    set_outcome(summary, required, "failed", "bang")
    assert ci_summary.check_leg(summary, "h100", exp) == [f"required test failed: {required}: bang"]


def test_wrong_gpu_for_the_leg_fails(expectations):
    summary = load("leg_h100_good.json")
    problems = ci_summary.check_leg(summary, "b200", expectations)
    assert problems[0] == "leg b200 wants an SM10x GPU, ran on NVIDIA H200 (compute capability 9.0)"


def test_missing_sm90_tests_say_their_module_was_skipped(expectations):
    summary = load("leg_b200_good.json")
    summary["environment"]["compute_capability"] = "9.0"  # as if an H100 had skipped the SM90 module
    problems = ci_summary.check_leg(summary, "h100", expectations)
    assert (
        f"required test missing: {LAYOUTS}test_sm90_refuses_native_next_n_4 "
        "(its module was skipped: the SM90 layout rule needs an SM90 (Hopper) GPU, found sm_100)"
    ) in problems


def test_upstream_tests_are_required_only_where_they_ran(expectations):
    summary = load("leg_b200_good.json")
    summary["tests"] = [t for t in summary["tests"] if t["part"] != "upstream-test-dsa"]
    problems = ci_summary.check_leg(summary, "b200", expectations)
    assert problems == [
        "required: at least 1 passed test(s) matching test/registered/attention/unittests/dsa/test_dsa.py::*; got none"
    ]
    summary["parts"][0]["status"] = "absent"
    assert ci_summary.check_leg(summary, "b200", expectations) == []


def test_a_required_part_that_errored_fails(expectations):
    summary = load("leg_h100_good.json")
    next(p for p in summary["parts"] if p["name"] == "project-gpu").update(
        status="error", detail="exit status 4; see project-gpu.log"
    )
    assert ci_summary.check_leg(summary, "h100", expectations) == [
        "part project-gpu did not run: exit status 4; see project-gpu.log"
    ]


# -- the expectations match the tests that exist -------------------------------------------


def test_expectations_name_the_layout_paths(expectations):
    h100 = {r.get("nodeid") for r in expectations["legs"]["h100"]["required"]}
    b200 = {r.get("nodeid") for r in expectations["legs"]["b200"]["required"]}
    assert f"{LAYOUTS}test_native_next_n_2_matches_per_token[8-4096]" in h100
    assert f"{LAYOUTS}test_paired_matches_per_token[8-4096-4]" in h100
    for n in (2, 4):
        assert f"{KIT}test_target_verify_eight_requests[bs8-next_n{n}]" in h100
        assert f"{KIT}test_target_verify_eight_requests[bs8-next_n{n}]" in b200
        assert f"{KIT}test_target_verify[bs1-next_n{n}]" in b200
    assert not any(n and n.startswith(LAYOUTS) for n in b200)  # SM90-only module
    assert expectations["legs"]["h100"]["runner_label"] == "1-gpu-large"
    assert expectations["legs"]["b200"]["runner_label"] == "4-gpu-b200"


def test_required_kit_nodeids_are_collected_by_the_kit_driver(expectations):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "ci/dsa_kit_driver.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    collected = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    assert collected, out.stdout + out.stderr
    for leg in expectations["legs"].values():
        for req in leg["required"]:
            if req.get("nodeid", "").startswith(KIT):
                assert req["nodeid"] in collected


def test_required_layout_nodeids_exist_in_the_gpu_test_file(expectations):
    """tests/gpu skips at module level without an SM90 GPU, so read its names and cases from source."""
    tree = ast.parse((REPO / "tests/gpu/test_paged_mqa_layouts.py").read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    cases = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "CASES"
    )
    ids = {f"{b}-{m}" for b, m in cases}
    for req in expectations["legs"]["h100"]["required"]:
        nodeid = req.get("nodeid", "")
        if not nodeid.startswith(LAYOUTS):
            continue
        name, _, param = nodeid[len(LAYOUTS) :].partition("[")
        assert name in functions, nodeid
        if param:
            assert param.rstrip("]").removesuffix("-4") in ids, nodeid


# -- loading -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: s.update(schema="other/1"), "schema is 'other/1'"),
        (lambda s: s.pop("command"), "no 'command' field"),
        (lambda s: s["environment"].pop("deep_gemm"), "environment must hold gpu, compute_capability"),
        (lambda s: s["tests"][0].update(outcome="error"), "has outcome 'error'"),
        (lambda s: s["tests"][0].pop("reason"), "tests[0] must hold nodeid, outcome, reason"),
    ],
)
def test_load_rejects_malformed_summaries(tmp_path, mutate, message):
    summary = load("leg_h100_good.json")
    mutate(summary)
    with pytest.raises(FatalError, match=message.replace("(", r"\(").replace("[", r"\[")):
        ci_summary.load_leg_summary(write(tmp_path, summary))


def test_load_rejects_non_json(tmp_path):
    path = tmp_path / "leg.json"
    path.write_text("{not json")
    with pytest.raises(FatalError, match="not valid JSON"):
        ci_summary.load_leg_summary(path)


# -- the command -----------------------------------------------------------------------------


def test_leg_verdict_command(tmp_path, capsys):
    assert main(["leg-verdict", str(DATA / "leg_h100_good.json"), "--leg", "h100"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "leg h100: passed"

    summary = load("leg_h100_good.json")
    summary["tests"] = [t for t in summary["tests"] if not t["nodeid"].startswith(LAYOUTS)]
    assert main(["leg-verdict", str(write(tmp_path, summary))]) == 1
    out = capsys.readouterr().out
    assert f"  FAIL required test missing: {LAYOUTS}test_sm90_refuses_native_next_n_4" in out
    assert out.splitlines()[-1] == "leg h100: FAILED"

    (tmp_path / "bad.json").write_text("[]")
    assert main(["leg-verdict", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sglpatch leg-verdict: error:") and "\n" not in err


# -- junit -------------------------------------------------------------------------------------


def test_junit_fallback_and_merge(tmp_path):
    part = tmp_path / "p.xml"
    part.write_text(
        '<testsuites><testsuite name="pytest" tests="3">'
        '<testcase classname="tests.gpu.test_x" name="test_a" time="0.5"/>'
        '<testcase classname="tests.gpu.test_x" name="test_b"><skipped message="no GPU"/></testcase>'
        '<testcase classname="tests.gpu.test_x" name="test_c"><failure message="boom"/></testcase>'
        "</testsuite></testsuites>"
    )
    records = ci_summary.tests_from_junit(part, "project-gpu")
    assert [(r["nodeid"], r["outcome"], r["reason"]) for r in records] == [
        ("tests.gpu.test_x::test_a", "passed", ""),
        ("tests.gpu.test_x::test_b", "skipped", "no GPU"),
        ("tests.gpu.test_x::test_c", "failed", "boom"),
    ]
    merged = tmp_path / "all.xml"
    ci_summary.merge_junit([("project-gpu", part), ("absent", tmp_path / "none.xml")], merged)
    text = merged.read_text()
    assert text.count("<testsuite ") == 1 and 'name="project-gpu"' in text


def test_real_leg_with_a_broken_environment_fails(expectations):
    """From the H200: sgl_kernel missing from the path, so every kit test failed on import."""
    summary = load("leg_h100_broken_env.json")
    assert summary["counts"] == {"passed": 20, "failed": 27, "skipped": 1}
    problems = ci_summary.check_leg(summary, "h100", expectations)
    # recorded before the series added its test to sglang's tree: those two are missing on top
    missing = [p for p in problems if p.startswith("required test missing: test/registered/")]
    assert len(missing) == 2 and len(problems) == 29
    assert f"failed: {KIT}test_target_verify_eight_requests[bs8-next_n4]: " in " | ".join(problems)
    assert all("ModuleNotFoundError" in p for p in problems if p not in missing)
