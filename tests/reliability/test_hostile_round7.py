"""The hostile trial of round 7, on real v0.5.14 checkouts: what `pr` does to PR branches the user works on,
what a rebase starts on (an apply cut short, another tool's operation waiting, a cherry-pick of several commits
the user has not finished), and the message a resolved conflict is committed with (docs/reliability.md, round 7).
"""

from __future__ import annotations

import pytest

from sglpatch.git import Git
from testing.pr_series import pr_project, pr_series  # noqa: F401  (pr_project: a fixture)
from testing.sglang_trees import as_tester
from testing.tree_bytes import refused

FIRST_BRANCH = "sglpatch-pr/test-first-group"


def _pr(sglpatch, checkout, patches, tmp_path, *args):
    return sglpatch("pr", "--sglang", checkout, "--patches", patches, "--out", tmp_path / "bodies", *args)


@pytest.mark.usefixtures("pr_project")
@pytest.mark.parametrize("where", ["checked out", "switched away"])
def test_pr_does_not_move_a_pr_branch_the_user_committed_on(
    sglpatch, checkout, tmp_path, base_repo, project_pin, where
):
    """A review fix committed on the PR branch a first `make pr` made. Before: the second `make pr` moved the
    branch to the rebuilt one with `git update-ref`: the user's commit was left in the reflog alone, and with
    the branch checked out HEAD moved under the work tree (git status: the fix staged as an addition, the
    patch's own change as a reversal)."""
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    assert _pr(sglpatch, checkout, patches, tmp_path)[0] == 0
    git = as_tester(Git(checkout))
    git.run("switch", "-q", FIRST_BRANCH)
    (checkout / "REVIEW.md").write_text("a reviewer's fix\n")
    git.run("add", "REVIEW.md")
    git.run("commit", "-q", "-m", "Address review")
    if where == "switched away":
        git.run("switch", "-q", "main")
    err = refused(sglpatch, checkout, "--sglang", checkout, "--patches", patches, "--out", tmp_path / "b", command="pr")
    assert FIRST_BRANCH in err and "nothing was changed" in err, err
    assert ("is checked out in" if where == "checked out" else "holds commits make pr did not leave there") in err
    assert git.run("log", "-1", "--format=%s", FIRST_BRANCH) == "Address review"


@pytest.mark.usefixtures("pr_project")
def test_pr_rebuilds_its_own_branches(sglpatch, checkout, tmp_path, base_repo, project_pin):
    """The guard above leaves pr's own branches to it: a second run (a new version of the series) moves them."""
    assert _pr(sglpatch, checkout, pr_series(base_repo, tmp_path, project_pin, "v1"), tmp_path)[0] == 0
    first = Git(checkout).rev_parse(FIRST_BRANCH)
    second = pr_series(base_repo, tmp_path, project_pin, "v2", first_line="VERBOSE_DEFAULT = 1")
    code, out, err = _pr(sglpatch, checkout, second, tmp_path)
    assert code == 0, err
    assert Git(checkout).rev_parse(FIRST_BRANCH) not in (None, first)
