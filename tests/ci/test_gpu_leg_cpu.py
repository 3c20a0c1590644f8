"""`sglpatch gpu-leg` end to end on this CPU machine, with stand-in parts so it stays fast.

SGLPATCH_PROJECT points the leg at a small project whose kit driver and tests/gpu skip the
way the real ones do without CUDA (a fixture skip, a module-level skip). The leg must still
write its junit and summary, and fail: no GPU test ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sglpatch.gpu import ci_summary

REPO = Path(__file__).resolve().parents[2]

KIT_STUB = textwrap.dedent("""
    import sys
    import pytest

    def main(argv):
        extra = argv[argv.index("--") + 1 :] if "--" in argv else []
        junit = argv[argv.index("--junit") + 1]
        return pytest.main([__file__, "-p", "no:cacheprovider", f"--junitxml={junit}", *extra])

    @pytest.fixture
    def kit():
        pytest.skip("CUDA is required")

    @pytest.mark.parametrize("next_n", (2, 4), ids=lambda n: f"bs8-next_n{n}")
    def test_target_verify_eight_requests(kit, next_n):
        pass

    if __name__ == "__main__":
        sys.exit(main(sys.argv[1:]))
    """)
GPU_STUB = textwrap.dedent("""
    import pytest

    pytest.skip("no CUDA device: DeepGEMM kernels need a GPU", allow_module_level=True)

    def test_native_next_n_2_matches_per_token():
        pass
    """)


def _empty_sglang_package(tmp_path: Path) -> Path:
    """An installed-package-shaped sglang folder holding only ``__init__.py``."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    return package


def _gpu_leg(cwd: Path, args: list[str], **env) -> subprocess.CompletedProcess:
    """`sglpatch gpu-leg ARGS` in a child run from ``cwd``, with ``env`` added and the test run's PYTHONPATH left out."""
    child_env = dict(os.environ, **env)
    child_env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "sglpatch", "gpu-leg", *args],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_leg_without_a_gpu_writes_its_reports_and_fails(tmp_path):
    project = tmp_path / "project"
    (project / "ci").mkdir(parents=True)
    (project / "tests" / "gpu").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "ci" / "dsa_kit_driver.py").write_text(KIT_STUB)
    (project / "tests" / "gpu" / "test_paged_mqa_layouts.py").write_text(GPU_STUB)
    package = _empty_sglang_package(tmp_path)
    stem = tmp_path / "out" / "gpu-leg-h100"

    run = _gpu_leg(
        tmp_path,
        ["--leg", "h100", "--sglang", str(package), "--patches", str(REPO / "patches" / "v0.5.14")]
        + ["--expectations", str(REPO / "ci" / "leg-expectations.json"), "--skip-apply", "--jobs", "1"]
        + ["--out", str(stem)],
        SGLPATCH_PROJECT=str(project),
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[gpu-leg] leg h100: FAILED" in run.stdout

    summary = ci_summary.load_leg_summary(stem.with_suffix(".json"))
    assert summary["leg"] == "h100" and summary["environment"]["gpu"] is None
    assert summary["sglang"]["kind"] == "package"
    # upstream's test_dsa.py and the series' own tests in sglang's tree: a package install has none
    assert [(p["name"], p["status"]) for p in summary["parts"]] == [
        ("upstream-test-dsa", "absent"),
        ("series-test_dsa_sm90_paged_mqa", "absent"),
        ("series-test_dsa_draft_extend_cuda_graph", "absent"),
        ("dsa-kit", "ran"),
        ("project-gpu", "ran"),
    ]
    outcomes = {t["nodeid"]: (t["outcome"], t["reason"]) for t in summary["tests"]}
    assert outcomes == {
        "ci/dsa_kit_driver.py::test_target_verify_eight_requests[bs8-next_n2]": ("skipped", "CUDA is required"),
        "ci/dsa_kit_driver.py::test_target_verify_eight_requests[bs8-next_n4]": ("skipped", "CUDA is required"),
        "tests/gpu/test_paged_mqa_layouts.py": ("skipped", "no CUDA device: DeepGEMM kernels need a GPU"),
    }
    assert summary["counts"] == {"passed": 0, "failed": 0, "skipped": 3}
    assert summary["gpu_tests_ran"] == 0
    assert summary["check"]["ok"] is False
    assert any(p.startswith("no GPU test ran") for p in summary["check"]["problems"])
    assert [p["name"] for p in summary["series"]["patches"]][0].startswith("0001-")

    junit = stem.with_suffix(".xml").read_text()
    assert 'name="dsa-kit"' in junit and 'name="project-gpu"' in junit
    assert json.loads(stem.with_suffix(".json").read_text())["command"].startswith("sglpatch gpu-leg --leg h100")


def test_leg_whose_series_does_not_apply_still_writes_a_failing_summary(tmp_path):
    """An sglang folder the series cannot apply to: no part runs, the summary says why."""
    package = _empty_sglang_package(tmp_path)
    stem = tmp_path / "out" / "gpu-leg-b200"
    run = _gpu_leg(
        tmp_path,
        # the base interpreter: the probe needs no torch here, and importing it would only cost time
        ["--leg", "b200", "--sglang", str(package), "--python", getattr(sys, "_base_executable", sys.executable)]
        + ["--out", str(stem)],
    )
    assert run.returncode == 1, run.stdout + run.stderr
    summary = ci_summary.load_leg_summary(stem.with_suffix(".json"))
    assert summary["apply"]["returncode"] == 2
    assert summary["check"]["problems"][0].startswith(f"the series did not apply to {package}: ")
    assert [(p["name"], p["status"]) for p in summary["parts"]] == [
        ("upstream-test-dsa", "absent"),
        ("series-test_dsa_sm90_paged_mqa", "absent"),
        ("series-test_dsa_draft_extend_cuda_graph", "absent"),
        ("dsa-kit", "error"),
        ("project-gpu", "error"),
    ]
    assert summary["tests"] == [] and summary["gpu_tests_ran"] == 0


def test_a_part_that_hangs_is_killed_and_reported(tmp_path):
    from sglpatch.gpu.gpu_leg import Part, run_part

    part = Part(
        "stuck", "a part that never ends", ["-c", "import time; print('started', flush=True); time.sleep(60)"], tmp_path
    )
    run_part(part, sys.executable, tmp_path, tmp_path, timeout=2)
    assert part.status == "error" and part.detail == "timed out after 2 s; see stuck.log"
    assert part.wall_s < 30
    assert (tmp_path / "stuck.log").read_text() == "started\n"


def test_the_series_test_in_sglangs_tree_is_a_required_part_of_a_checkout_leg(tmp_path):
    from sglpatch.gpu.gpu_leg import plan_parts, series_sglang_tests

    tests = series_sglang_tests(REPO / "patches" / "v0.5.14")
    assert tests == [
        "test/registered/attention/unittests/dsa/test_dsa_sm90_paged_mqa.py",
        "test/registered/attention/unittests/dsa/test_dsa_draft_extend_cuda_graph.py",
    ]
    # v0.5.23's series puts a GPU and a CPU test there: the leg runs every test the series adds to sglang's tree
    assert sorted(series_sglang_tests(REPO / "patches" / "v0.5.23")) == [
        "test/registered/kernels/ops/attention/test_dsa_sm90_paged_mqa.py",
        "test/registered/unit/layers/attention/test_dsa_sm90_paged_mqa_rows.py",
    ]
    checkout = tmp_path / "sglang"
    (checkout / tests[0]).parent.mkdir(parents=True)
    (checkout / tests[0]).write_text("")
    parts = plan_parts("checkout", checkout, "h100", tmp_path / "parts", "cmd", 1, tests)
    part = next(p for p in parts if p.name == "series-test_dsa_sm90_paged_mqa")
    assert part.required and part.status == "pending" and part.cwd == checkout
    assert part.args[:3] == ["-m", "pytest", tests[0]]
