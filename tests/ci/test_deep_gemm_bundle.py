"""ci/deep_gemm_bundle.py's prefix of a DeepGEMM line (`gpu_bundle.py --deep-gemm --deep-gemm-patches N`): the
commit packed holds the first N patches only, on a real git repository with one commit per patch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from sglpatch.git import Git

CI = Path(__file__).resolve().parents[2] / "ci"


def _load_bundle_module():
    """ci/deep_gemm_bundle.py, a script beside ci/gpu_bundle.py, loaded by path."""
    sys.path.insert(0, str(CI))
    try:
        spec = importlib.util.spec_from_file_location("_ci_deep_gemm_bundle", CI / "deep_gemm_bundle.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(CI))


deep_gemm_bundle = _load_bundle_module()

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _series_branch(path: Path) -> Git:
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    for index, text in enumerate(("pin", "build patch", "kernel patch")):
        (path / "kernel.cuh").write_text(text + "\n")
        subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(path), *IDENTITY, "commit", "-qm", f"commit {index}"], check=True)
    return Git(path)


def _pin(git: Git) -> str:
    return git.run("rev-list", "--max-parents=0", "main")


def _content_at(git: Git, rev: str) -> str:
    return git.run("show", f"{rev}:kernel.cuh")


def test_the_first_n_patches_are_packed(tmp_path):
    git = _series_branch(tmp_path / "dg")
    patches = ["0001-build.patch", "0002-kernel.patch"]
    assert deep_gemm_bundle.series_prefix(git, "main", patches, None, _pin(git)) == ("main", patches)
    rev, kept = deep_gemm_bundle.series_prefix(git, "main", patches, 1, _pin(git))
    assert (_content_at(git, rev), kept) == ("build patch", patches[:1])
    rev, kept = deep_gemm_bundle.series_prefix(git, "main", patches, 0, _pin(git))
    assert (_content_at(git, rev), kept) == ("pin", [])


def test_more_patches_than_the_line_has_is_refused(tmp_path):
    git = _series_branch(tmp_path / "dg")
    with pytest.raises(SystemExit, match="takes 0 to 2"):
        deep_gemm_bundle.series_prefix(git, "main", ["a", "b"], 3, _pin(git))
