"""`make check-patches` on a DeepGEMM line: each prefix's SM90 paged-MQA kernel compiled for sm_90a with nvcc
from PyPI wheels (no GPU). Marked series_proof: the first run downloads the CUDA 13.0 wheels (about 150 MB),
and each compile takes a few seconds; `make check-patches` runs the same check for the project's line.

The broken-kernel case runs on the stand-in of testing/deep_gemm_trees.py (the sgl-deep-gemm wheel's package
as a git repo, standing in for the GitHub checkout). The line's apply and revert on deepseek-ai/DeepGEMM itself
needs its source (SGLPATCH_DEEP_GEMM_SOURCE: a clone, a mirror or the URL) and skips, saying so, without it.
"""

from __future__ import annotations

import subprocess

import pytest

from sglpatch import project
from sglpatch.git import Git
from sglpatch.lines import line_named
from sglpatch.project_kind import DEEP_GEMM
from sglpatch.rebase.git_releases import fetch_source
from sglpatch.series import load_series
from testing.deep_gemm_trees import KERNEL, LINE, deep_gemm_series
from testing.tree_bytes import fingerprint

pytestmark = pytest.mark.series_proof


def test_every_prefix_of_the_deep_gemm_line_compiles_the_kernel(sglpatch):
    code, out, err = sglpatch("check-patches", "--line", LINE)
    assert code == 0, err
    assert f"line {LINE}: every prefix's SM90 paged-MQA kernel compiles for sm_90a" in out
    assert "next_n 1, 64 heads: 96 registers, 0 B spill stores" in out and "[FAIL]" not in out
    # from the read-once patch on, the shapes its host code asks for (kernel-shapes.json) compile too
    for shape in ("next_n 3, 64 heads", "next_n 6, 64 heads", "next_n 6, 32 heads"):
        assert f"read-each-KV-tile-once-for-all.patch: SM90 paged-MQA kernel, {shape}: " in out


def test_a_patch_that_breaks_the_kernels_compile_fails_on_cpu(
    sglpatch, tmp_path, monkeypatch, deep_gemm_source, stand_in_pin
):
    monkeypatch.setenv("SGLPATCH_DEEP_GEMM_SOURCE", str(deep_gemm_source))
    monkeypatch.setattr(project, "PROJECT_ROOT", tmp_path)  # its default base goes to tmp_path/build
    edit = (KERNEL, "kNumTMAThreads == 128 and", "kNumTMAThreads == 129 and")
    patches = deep_gemm_series(deep_gemm_source, stand_in_pin, tmp_path / "broken", [edit])
    code, out, err = sglpatch("check-patches", "--patches", patches)
    assert code == 2 and "1 of 1 patches fail" in err, err
    base, patched = [line for line in out.splitlines() if "SM90 paged-MQA kernel, next_n 2" in line]
    assert base.startswith("the base:") and base.endswith("[ok]")
    assert "does not compile" in patched and patched.endswith("[FAIL]"), out


def test_a_patch_whose_wgmma_ptxas_serializes_fails_on_cpu(
    sglpatch, tmp_path, monkeypatch, deep_gemm_source, stand_in_pin
):
    """A kernel that touches a WGMMA's accumulators before waiting for it still compiles, but ptxas then waits
    for every WGMMA itself (C7517): the overlap a patch is for is gone, so the check fails it."""
    monkeypatch.setenv("SGLPATCH_DEEP_GEMM_SOURCE", str(deep_gemm_source))
    monkeypatch.setattr(project, "PROJECT_ROOT", tmp_path)
    commit = "ptx::warpgroup_commit_batch();"
    edit = (KERNEL, commit, commit + ' asm volatile("add.f32 %0, %0, 0f00000000;" : "+f"(accum[0]));')
    patches = deep_gemm_series(deep_gemm_source, stand_in_pin, tmp_path / "serialized", [edit])
    code, out, err = sglpatch("check-patches", "--patches", patches)
    assert code == 2 and "1 of 1 patches fail" in err, err
    base, patched = [line for line in out.splitlines() if "SM90 paged-MQA kernel, next_n 2" in line]
    assert base.endswith("[ok]")
    assert "ptxas serializes its WGMMAs" in patched and patched.endswith("[FAIL]"), out


def test_the_line_applies_to_a_deepseek_checkout_and_reverts_byte_exact(sglpatch, tmp_path, line_pin):
    """The project's own line on deepseek-ai/DeepGEMM itself (SGLPATCH_DEEP_GEMM_SOURCE: a clone, a mirror or
    the URL); the line is found from the checkout's pinned files, as `make apply SGLANG=<checkout>` finds it."""
    source, why = fetch_source(DEEP_GEMM, line_pin.commit)
    if source is None:
        pytest.skip(f"needs deepseek-ai/DeepGEMM at {line_pin.commit[:7]}: {why}")
    checkout = tmp_path / "DeepGEMM"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(source.workdir), str(checkout)], check=True)
    Git(checkout).run("checkout", "-q", "-b", "work", line_pin.commit)
    before = {p: d for p, d in fingerprint(checkout).items() if not p.startswith(".git/")}
    code, out, err = sglpatch("apply", "--sglang", checkout)
    line = line_named(LINE)
    count = len(load_series(line.directory, project=line.project).patches)
    assert code == 0 and f"line {LINE} ({count} patches, pinned at deep_gemm 54e2261)" in out, err
    assert "DG_CUTLASS_INCLUDE_DIR" in (checkout / "setup.py").read_text()
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    assert {p: d for p, d in fingerprint(checkout).items() if not p.startswith(".git/")} == before
