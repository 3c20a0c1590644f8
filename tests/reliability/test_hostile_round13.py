"""The hostile trial of round 13: what round 12 left untried (`clean` and the reflog), the user's shell
environment around the toolkit, and more (docs/reliability.md, round 13).
"""

from __future__ import annotations

import subprocess

import pytest

from sglpatch.git import Git
from testing.sglang_trees import BACKEND, TESTER_IDENTITY, as_tester
from testing.tree_bytes import refused


def _default_base(series_project, base_repo):
    """build/sglang as sglpatch lays it out: a clone of the release."""
    where = series_project / "build" / "sglang"
    where.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(base_repo), str(where)], check=True)
    return where


@pytest.mark.parametrize("left", ["reset away", "detached and left"])
def test_clean_keeps_a_commit_of_the_users_that_only_the_reflog_holds(sglpatch, series_project, base_repo, left):
    """A commit the user made in build/sglang and then left (a `git reset --hard HEAD~1`, or a commit on a
    detached HEAD they switched away from): no ref holds it, only the reflog, which is how the user gets it back.
    clean looked at refs alone: the checkout went with it, exit 0. Now it is named and nothing is deleted."""
    where = _default_base(series_project, base_repo)
    git = as_tester(Git(where))
    if left == "detached and left":
        git.run("checkout", "-q", "--detach")
    (where / BACKEND).write_text("my work\n")
    git.run("commit", "-q", "-am", "My work I left")
    git.run("checkout", "-q", "main") if left == "detached and left" else git.run("reset", "-q", "--hard", "HEAD~1")
    err = refused(sglpatch, series_project, command="clean")
    assert "only the reflog holds, the last" in err and "My work I left" in err, err
    assert "nothing was deleted" in err, err


def test_clean_still_deletes_a_default_base_sglpatch_applied_and_reverted(sglpatch, series_project, monkeypatch):
    """The guard above reads the commits `git commit` made: apply's and revert's switches, logged in the same
    reflog (the series' commits by the user's committer), are sglpatch's, and clean deletes build/ after them."""
    for key, value in TESTER_IDENTITY.items():
        monkeypatch.setenv(key, value)
    assert sglpatch("apply")[0] == 0
    assert sglpatch("revert")[0] == 0
    code, out, err = sglpatch("clean")
    assert code == 0 and not (series_project / "build").exists(), (out, err)
