"""`sglpatch check-patches` on the real series and trees: each patch's tests fail without it, pass with it."""

from __future__ import annotations

import re

import pytest

from sglpatch.lines import default_line, default_patch_dir
from sglpatch.series import load_series
from testing.sglang_trees import SECOND, one_patch_series


@pytest.mark.series_proof  # several minutes: `make check-patches` is this proof, for every line
def test_every_patch_of_the_series_is_proven_by_its_own_tests(sglpatch):
    code, out, err = sglpatch("check-patches", "--line", default_line().name)
    assert code == 0, err
    assert out.count("[ok]") == len(load_series(default_patch_dir()).patches)
    assert "[FAIL]" not in out


def test_a_patch_whose_named_tests_do_not_see_it_fails_the_check(sglpatch, tmp_path, base_repo, project_pin):
    message = (
        "[Spec] A change its named tests cannot see\n\nWhy: negative check.\n\n"
        "Upstream-PR: 1\nTests: tests/patched/test_p4_future_map_seed.py\n"
    )
    edit = (SECOND, "class GlobalConfig:", "# invisible\nclass GlobalConfig:")
    patches = one_patch_series(base_repo, project_pin, tmp_path / "blind", message, edit)
    code, out, err = sglpatch("check-patches", "--patches", patches)
    assert code == 2 and "line v0.5.14: 1 of 1 patches fail their own check" in err
    assert "[FAIL]" in out and re.search(r"their tests: [1-9][0-9]* failed", out)


def test_fewer_than_one_run_at_a_time_is_a_one_line_refusal(sglpatch):
    code, out, err = sglpatch("check-patches", "--jobs", "0")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "--jobs 0" in err, err


# The patch's own test, in a project of its own (tests/patched/ is the default line's CPU tests folder): it reads
# the tree it is pointed at. MARKED_AT_IMPORT asserts at import, so without the patch it cannot even be collected.
OWN_TEST = """import os
from pathlib import Path

TEXT = (Path(os.environ["SGLPATCH_SGLANG_TREE"]) / "sglang" / "global_config.py").read_text()
{at_import}

def test_the_global_config_is_marked():
    assert "# checked" in TEXT
"""
MARKED_AT_IMPORT = 'assert "# checked" in TEXT, "the patch is not applied"'


@pytest.fixture
def own_project(tmp_path, monkeypatch, base_repo, project_pin):
    """A project whose one line is a one-patch series naming tests/patched/test_marked.py as its test."""
    root = tmp_path / "project"
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", root)
    monkeypatch.setattr("sglpatch.commands.check_patches.PROJECT_ROOT", root)
    message = (
        "[Spec] Mark the global config as checked\n\nWhy: to check the check.\n\n"
        "Upstream-PR: 1\nTests: tests/patched/test_marked.py\n"
    )
    edit = (SECOND, "class GlobalConfig:", "# checked\nclass GlobalConfig:")
    one_patch_series(base_repo, project_pin, root / "patches" / "v0.5.14", message, edit)
    (root / "tests" / "patched").mkdir(parents=True)
    return root / "tests" / "patched" / "test_marked.py"


@pytest.mark.parametrize("at_import", ["", MARKED_AT_IMPORT], ids=["fails-on-an-assertion", "cannot-be-collected"])
def test_without_the_patch_its_tests_must_run_and_fail(sglpatch, own_project, at_import):
    """Issue 36: a test that cannot even be collected without the patch (pytest exit 2) counted as "fails
    without it". Now only tests that run and fail do; the others fail the check, said in the patch's line."""
    own_project.write_text(OWN_TEST.format(at_import=at_import))
    code, out, err = sglpatch("check-patches", "--line", "v0.5.14")
    [verdict] = [line for line in out.splitlines() if line.startswith("0001-")]
    if not at_import:
        assert code == 0, err
        assert re.search(r"without it: 1 failed in .*their tests: 1 passed in .*\[ok\]$", verdict), verdict
    else:
        assert code == 2 and "1 of 1 patches fail their own check" in err, err
        assert "without it its tests did not run and fail (1 error in " in verdict, verdict
        assert "errors during collection), so they prove nothing" in verdict and verdict.endswith("[FAIL]")
