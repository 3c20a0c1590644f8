"""`sglpatch check-patches` on the real series and trees: each patch's tests fail without it, pass with it."""

from __future__ import annotations

import re

import pytest

from sglpatch.lines import default_line
from sglpatch.project import default_patch_dir
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
