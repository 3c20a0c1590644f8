"""The DeepGEMM line (a second ProjectKind whose releases are git commits) through every command a line has.

The checkouts here are the stand-in of testing/deep_gemm_trees.py: a real git repo made of the sgl-deep-gemm
wheel's package (PyPI), standing in for the GitHub checkout of deepseek-ai/DeepGEMM, which CI cannot reach.
The kernel's compile (nvcc from PyPI) is `make check-patches`'s and test_deep_gemm_kernel_check.py's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile

import pytest

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.project_kind import DEEP_GEMM
from sglpatch.rebase.default_base import ensure_default_base
from sglpatch.rebase.git_releases import build_git_base, stand_in_of
from sglpatch.rebase.kernel_compile import SHAPES, SHAPES_FILE, Shape, kernel_source, shapes_of
from sglpatch.series import check_path_is_safe, load_series
from sglpatch.wheels import fetch_wheel
from testing.deep_gemm_trees import KERNEL, LINE, NUMERIC, SCHEDULER
from testing.sglang_trees import as_tester, replace_in, user_clone
from testing.tree_bytes import fingerprint


@pytest.fixture(autouse=True)
def _source(monkeypatch, deep_gemm_source):
    monkeypatch.setenv("SGLPATCH_DEEP_GEMM_SOURCE", str(deep_gemm_source))


@pytest.fixture
def dg_checkout(tmp_path, deep_gemm_source):
    return user_clone(deep_gemm_source, tmp_path / "DeepGEMM")


def test_lines_lists_the_deep_gemm_line_with_its_project(sglpatch):
    code, out, err = sglpatch("lines")
    assert code == 0, err
    assert f"{LINE}: 2 patches in patches/{LINE}" in out
    assert "  project:      deepseek-ai/DeepGEMM (deep_gemm 54e2261)" in out
    assert "  default base: build/deep_gemm-54e2261" in out


def test_the_line_pins_54e2261_and_its_sm90_headers_are_the_wheels(line_pin):
    """The pin names the commit, and the three SM90 paged-MQA headers it records are byte for byte those of
    sgl-deep-gemm 0.2.3.post2 (sglang 0.5.23's pin): checked here against the wheel from PyPI."""
    assert line_pin.commit == "54e22612409371d6364144b69086735beb54e98b" and line_pin.tag == LINE
    wheel = fetch_wheel("0.2.3.post2", line_pin.wheel, DEEP_GEMM)
    headers = [KERNEL, SCHEDULER, "deep_gemm/include/deep_gemm/mma/sm90.cuh"]
    with zipfile.ZipFile(wheel) as archive:
        for path in headers:
            data = archive.read(path)
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == line_pin.blobs[path], path
    assert {"setup.py", "csrc/jit_kernels/impls/sm90_fp8_mqa_logits.hpp"} <= set(line_pin.blobs)


def test_apply_then_revert_on_a_deep_gemm_checkout_is_byte_exact(sglpatch, dg_checkout, deep_gemm_patches):
    before = fingerprint(dg_checkout)
    code, out, err = sglpatch("apply", "--sglang", dg_checkout, "--patches", deep_gemm_patches)
    assert code == 0, err
    git = Git(dg_checkout)
    assert git.current_branch().startswith("sglpatch/deep_gemm/")
    assert "// test series: a note" in (dg_checkout / SCHEDULER).read_text()
    code, out, err = sglpatch("status", "--sglang", dg_checkout, "--patches", deep_gemm_patches)
    assert code == 0 and "applied" in out and "pin:    at deep_gemm " in out, out + err
    code, out, err = sglpatch("revert", "--sglang", dg_checkout)
    assert code == 0, err
    assert git.rev_parse("refs/heads/sglpatch/" + deep_gemm_patches.name) is None
    assert _work_tree(fingerprint(dg_checkout)) == _work_tree(before)
    code, out, err = sglpatch("recover", "--sglang", dg_checkout)
    assert code == 0 and "nothing to recover" in out


def _work_tree(picture: dict[str, str]) -> dict[str, str]:
    return {path: digest for path, digest in picture.items() if not path.startswith(".git/")}


def test_apply_refuses_a_checkout_that_differs_from_the_pin_and_changes_nothing(
    sglpatch, dg_checkout, deep_gemm_patches
):
    replace_in(dg_checkout / SCHEDULER, "namespace deep_gemm", "// someone else's edit\nnamespace deep_gemm")
    git = as_tester(Git(dg_checkout))
    git.run("commit", "-qam", "an edit of the pinned header")
    before = fingerprint(dg_checkout)
    code, out, err = sglpatch("apply", "--sglang", dg_checkout, "--patches", deep_gemm_patches)
    assert code == 2 and "base differs from the pin (deep_gemm " in err and SCHEDULER in err, err
    assert fingerprint(dg_checkout) == before


def test_a_deep_gemm_patch_names_deep_gemm_paths_only():
    check_path_is_safe("csrc/apis/attention.hpp", DEEP_GEMM)
    check_path_is_safe("setup.py", DEEP_GEMM)
    with pytest.raises(ValueError, match="outside deep_gemm/"):
        check_path_is_safe("python/sglang/srt/layers/attention/dsa_backend.py", DEEP_GEMM)


def test_drift_and_rebase_onto_a_newer_commit(sglpatch, tmp_path, deep_gemm_source, dg_checkout, deep_gemm_patches):
    """A newer upstream commit that edits next to the patch: drift says 3-way, and rebase writes the series
    against it (its pin the new commit, the patch carried)."""
    newer = user_clone(deep_gemm_source, tmp_path / "upstream")
    replace_in(newer / NUMERIC, "    return 1 - sim", "    return 1 - sim  # newer upstream")
    as_tester(Git(newer)).run("commit", "-qam", "a newer upstream commit")
    tip = Git(newer).run("rev-parse", "HEAD")
    Git(deep_gemm_source).run("fetch", "-q", str(newer), "HEAD:refs/heads/newer")
    code, out, err = sglpatch("drift", "--patches", deep_gemm_patches, "--out", tmp_path / "drift")
    Git(deep_gemm_source).run("branch", "-D", "-q", "newer")
    assert code == 0, err
    assert "Drift of the series (pinned at deep_gemm " in out
    assert f"| newer ({tip[:7]}) |" in out and "| clean | 3-way |" in out, out
    Git(dg_checkout).run("fetch", "-q", str(newer), "HEAD:refs/heads/newer")
    series = tmp_path / "series"
    shutil.copytree(deep_gemm_patches, series)
    code, out, err = sglpatch(
        "rebase", "--sglang", dg_checkout, "--patches", series, "--onto", "newer", "--report-dir", tmp_path
    )
    assert code == 0, err
    pin = json.loads((series / "pin.json").read_text())["deep_gemm"]
    assert pin["commit"] == tip and pin["release"] == tip[:7]
    assert len(load_series(series).patches) == 1
    assert Git(dg_checkout).current_branch() == f"sglpatch/deep_gemm/{tip[:7]}"


def test_drift_of_the_line_needs_its_real_source(sglpatch, tmp_path, monkeypatch):
    """The stand-in does not hold 54e2261, so the line's drift is a one-line refusal that names the variable."""
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "cache"))
    code, out, err = sglpatch("drift", "--line", LINE, "--out", tmp_path / "drift")
    assert code == 2 and "drift of deep_gemm 54e2261 needs its source" in err, err
    assert "has no commit 54e22612409371d6364144b69086735beb54e98b" in err and "SGLPATCH_DEEP_GEMM_SOURCE" in err


def test_pr_renders_a_body_for_deepseek_ai_and_refuses_to_submit_a_stand_in(
    sglpatch, tmp_path, dg_checkout, deep_gemm_patches
):
    code, out, err = sglpatch("pr", "--sglang", dg_checkout, "--patches", deep_gemm_patches, "--out", tmp_path / "pr")
    assert code == 0, err
    assert "gh pr create --repo deepseek-ai/DeepGEMM" in out
    assert "## Motivation" in (tmp_path / "pr" / "test-group.md").read_text()
    code, out, err = sglpatch(
        "pr",
        "--sglang",
        dg_checkout,
        "--patches",
        deep_gemm_patches,
        "--fork",
        "https://github.com/me/DeepGEMM",
        "--submit",
    )
    assert code == 2 and "imported from its" in err, err


def test_without_its_source_the_default_base_is_a_stand_in_and_says_so(tmp_path, line_pin, monkeypatch, capsys):
    monkeypatch.setenv("SGLPATCH_DEEP_GEMM_SOURCE", "stand-in")
    base = build_git_base(line_pin, tmp_path / "deep_gemm-54e2261")
    said = capsys.readouterr().out
    assert "SGLPATCH_DEEP_GEMM_SOURCE=stand-in: deep_gemm 54e2261 is laid out from a stand-in" in said
    assert "not deepseek-ai/DeepGEMM 54e2261: no csrc/, setup.py or tests/" in said
    git = Git(base)
    assert stand_in_of(git, LINE) and git.rev_parse(LINE)
    assert not (base / "setup.py").exists() and (base / KERNEL).is_file()


def test_a_stand_in_base_left_in_place_says_how_the_real_commit_replaces_it(tmp_path, line_pin, monkeypatch, capsys):
    """A later command reuses the stand-in even with the source set: each says so and names the move that keeps it."""
    monkeypatch.setenv("SGLPATCH_DEEP_GEMM_SOURCE", "stand-in")
    base = build_git_base(line_pin, tmp_path / "deep_gemm-54e2261")
    assert "move it aside (`mv -n " in capsys.readouterr().out
    before = fingerprint(base)
    monkeypatch.delenv("SGLPATCH_DEEP_GEMM_SOURCE")
    assert ensure_default_base(line_pin, base) == base
    said = capsys.readouterr().out
    assert f"note: {base} holds a stand-in for deep_gemm 54e2261" in said
    assert "to lay out deepseek-ai/DeepGEMM 54e2261 in its place" in said and f"`mv -n {base} " in said
    assert fingerprint(base) == before


def test_a_source_without_the_pinned_commit_is_a_one_line_refusal_of_rebase(sglpatch, dg_checkout, deep_gemm_source):
    code, out, err = sglpatch("rebase", "--sglang", dg_checkout, "--line", LINE, "--onto", "HEAD")
    assert code == 2 and "does not hold deepseek-ai/DeepGEMM 54e22612409" in err and err.count("\n") == 1, err


def test_a_prefix_compiles_the_shapes_its_patches_list(tmp_path):
    (tmp_path / SHAPES_FILE).write_text(json.dumps({"0002-b.patch": [[3, 64, 128, 512], [6, 32, 64, 384]]}))
    assert shapes_of(tmp_path, ["0001-a.patch"]) == SHAPES
    assert shapes_of(tmp_path, ["0001-a.patch", "0002-b.patch"]) == (
        *SHAPES,
        Shape(3, 64, 128, 512),
        Shape(6, 32, 64, 384),
    )
    assert "split 128, 512 math threads" not in kernel_source(SHAPES[0])
    assert "3, 64, 128, 64, true, false, 3, 3, 128, 128, 512, float" in kernel_source(Shape(3, 64, 128, 512))
    # a fifth number is the KV stages the host code asks for
    assert "3, 64, 128, 64, true, false, 3, 4, 128, 128, 512, float" in kernel_source(Shape(3, 64, 128, 512, 4))
    (tmp_path / SHAPES_FILE).write_text(json.dumps({"0002-b.patch": [[3, "x"]]}))
    with pytest.raises(FatalError, match=r"\[next_n, heads, split_kv, math_threads\(, kv_stages\(, weights\)\)\]"):
        shapes_of(tmp_path, ["0002-b.patch"])


def test_a_shape_may_name_bf16_weights_a_template_argument_after_the_logits(tmp_path):
    (tmp_path / SHAPES_FILE).write_text(json.dumps({"0003-c.patch": [[4, 64, 128, 512, 3, "bf16"]]}))
    assert shapes_of(tmp_path, ["0003-c.patch"]) == (*SHAPES, Shape(4, 64, 128, 512, 3, "bf16"))
    assert "3, 3, 128, 128, 512, float, cutlass::bfloat16_t>" in kernel_source(Shape(4, 64, 128, 512, 3, "bf16"))
    assert kernel_source(Shape(4, 64, 128, 512)).count("bfloat16") == 0
    (tmp_path / SHAPES_FILE).write_text(json.dumps({"0003-c.patch": [[4, 64, 128, 512, 3, "fp16"]]}))
    with pytest.raises(FatalError, match="weights 'fp16' not one of float, bf16"):
        shapes_of(tmp_path, ["0003-c.patch"])
