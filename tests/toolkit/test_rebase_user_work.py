"""A rebase never loses the user's work (issue 48): files in the series folder it did not write, commits on top
of the series, hooks of the user's; and what it says about a stopped or finished rebase is true.

Real trees: the release chain v0.5.14 -> 0.5.17 from PyPI wheels (`testing/sglang_trees.py`).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from sglpatch.git import Git
from sglpatch.series import load_series
from testing.sglang_trees import OVERLAP, SECOND, TESTER_IDENTITY, as_tester, changed_line, one_patch_series
from testing.tree_bytes import tree_state

pytestmark = pytest.mark.network  # releases 0.5.15 to 0.5.17 from PyPI, unless cached

MY_WIP = "my work in progress: not in the series\n"


def rebase(sglpatch, chain, patches, tmp_path, *args):
    return sglpatch("rebase", "--sglang", chain, "--patches", patches, "--report-dir", tmp_path / "report", *args)


# -- B: a patch file the series does not list ------------------------------------------------


def test_a_patch_the_series_does_not_list_survives_the_rebase_of_its_folder(sglpatch, chain, patches, tmp_path):
    mine = patches / "0007-my-wip.patch"
    mine.write_text(MY_WIP)
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 0, err
    assert mine.read_text() == MY_WIP
    assert [p.name for p in load_series(patches).patches] == sorted(p.name for p in patches.glob("000[12]-*.patch"))


def test_a_patch_of_the_users_where_the_rebased_series_writes_one_stops_the_rebase(sglpatch, chain, patches, tmp_path):
    """Dropping patch 1 renumbers patch 2 as 0001-...: a file of that name the series did not list is the user's."""
    second = sorted(patches.glob("0002-*.patch"))[0].name
    mine = patches / ("0001-" + second.removeprefix("0002-"))
    mine.write_text(MY_WIP)
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    before = tree_state(patches)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16", "--drop", "1")
    assert code == 1 and str(mine) in err and "move that file away" in err, err
    assert tree_state(patches) == before
    mine.rename(tmp_path / mine.name)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--continue")
    assert code == 0, err
    assert (tmp_path / mine.name).read_text() == MY_WIP
    assert [p.name for p in load_series(patches).patches] == [mine.name]
    assert not (patches / second).exists()  # the old series' own patch, which the rebase replaced


# -- D: a commit of the user's on top of the series -------------------------------------------


def commit_of_my_own(checkout) -> str:
    """A commit of the user's on top of whatever HEAD is; returns its id."""
    git = as_tester(Git(checkout))
    (checkout / "python/sglang/my_notes.py").write_text("MINE = 1\n")
    git.run("add", "python/sglang/my_notes.py")
    git.run("commit", "-q", "-m", "My own commit on top of the series")
    return git.run("rev-parse", "HEAD")


def test_a_commit_of_the_users_on_top_of_the_series_is_never_left_behind(sglpatch, chain, patches, tmp_path):
    """The rebase said "2 of 2 patches kept" and its branch lacked the commit. It refuses in one line, and what
    it says to do carries the commit."""
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    mine = commit_of_my_own(chain)
    before = tree_state(chain), tree_state(patches)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "1 commit of your own" in err and "My own commit on top of the series" in err, err
    assert (tree_state(chain), tree_state(patches)) == before
    detach = re.search(r"`(git checkout --detach [0-9a-f]+)`", err).group(1)
    subprocess.run(detach, shell=True, check=True, cwd=chain)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 0, err
    git = as_tester(Git(chain))
    git.run("cherry-pick", mine)
    assert git.run("log", "-1", "--format=%s") == "My own commit on top of the series"
    assert git.is_ancestor(mine, "sglpatch/v0.5.14")  # where it was all along


# -- F and the newcomer's list: what status and apply say about the default base mid-rebase and after ----


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose default line is a series of one patch that conflicts on 0.5.15, and its build/sglang."""
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", tmp_path / "project")
    return tmp_path / "project"


def line_of_one_patch(project, base_repo, project_pin, edit):
    message = "[Spec] One patch for the line\n\nWhy: a line of one patch.\n\nUpstream-PR: 1\n"
    return one_patch_series(base_repo, project_pin, project / "patches" / "v0.5.14", message, edit)


def test_status_and_apply_name_a_stopped_rebase_of_the_default_base(
    sglpatch, project, base_repo, project_pin, release_chain
):
    """Issue 48 F: both said the tree "holds sglang 0.5.15, which matches no series line"."""
    line = changed_line(release_chain, OVERLAP)
    line_of_one_patch(project, base_repo, project_pin, (OVERLAP, line, line + "  # ours"))
    assert sglpatch("apply")[0] == 0
    code, out, err = sglpatch("rebase", "--onto", "0.5.15", "--report-dir", project / "report")
    assert code == 1 and "conflicts in" in err, err
    base = project / "build" / "sglang"
    code, out, err = sglpatch("status")
    assert code == 0, err
    assert "line:   v0.5.14" in out and "NOTE:   a rebase is stopped at 0001-" in out, out
    assert "refuses: a rebase is stopped at 0001-" in out.splitlines()[-1], out
    before = tree_state(base)
    code, out, err = sglpatch("apply")
    assert code == 2 and "a rebase is stopped at 0001-" in err and "matches no series line" not in err, err
    assert tree_state(base) == before
    code, out, err = sglpatch("status", "--sglang", base)
    assert code == 0 and "NOTE:   a rebase is stopped at 0001-" in out, out
    code, out, err = sglpatch("clean")  # the rebase waits for the user's resolution: nothing is deleted
    assert code == 2 and "a rebase is stopped at 0001-" in err and tree_state(base) == before, err


def test_status_after_a_rebase_of_the_default_base_describes_the_new_line(sglpatch, project, base_repo, project_pin):
    line_of_one_patch(project, base_repo, project_pin, (SECOND, "class GlobalConfig", "# ours\nclass GlobalConfig"))
    assert sglpatch("apply")[0] == 0
    code, out, err = sglpatch("rebase", "--onto", "0.5.15", "--report-dir", project / "report")
    assert code == 0, err
    code, out, err = sglpatch("status")
    assert code == 0, err
    assert "line:   v0.5.15" in out and "pin:    at sglang 0.5.15" in out, out
    assert out.splitlines()[-1] == "apply:  nothing to do: the series is in", out
    code, out, err = sglpatch("apply")
    assert code == 0 and "already applied" in out, (out, err)


def test_clean_deletes_the_default_base_after_its_rebase(sglpatch, project, base_repo, project_pin, monkeypatch):
    """The rebase keeps the series it replaced under refs/sglpatch/backup/rebase-*: sglpatch's own commits (the
    record names them), made here with the user's identity, so make clean deletes them."""
    for key, value in TESTER_IDENTITY.items():
        monkeypatch.setenv(key, value)
    line_of_one_patch(project, base_repo, project_pin, (SECOND, "class GlobalConfig", "# ours\nclass GlobalConfig"))
    assert sglpatch("apply")[0] == 0
    assert sglpatch("rebase", "--onto", "0.5.15", "--report-dir", project / "report")[0] == 0
    base = Git(project / "build" / "sglang")
    assert base.run("for-each-ref", "--format=%(refname)", "refs/sglpatch/backup/").startswith(
        "refs/sglpatch/backup/rebase-"
    )
    code, out, err = sglpatch("clean")
    assert code == 0 and not (project / "build").exists(), err


# -- L, K: the user's hooks and signing settings in the rebase's own commits ------------------------------


def test_a_hook_of_the_users_never_writes_into_the_rebased_patches(sglpatch, chain, patches, tmp_path):
    """Issue 48 L: a prepare-commit-msg hook in core.hooksPath ran in every cherry-pick, and its text was
    written into each rewritten patch file."""
    hooks = tmp_path / "my-hooks"
    hooks.mkdir()
    for name in ("prepare-commit-msg", "commit-msg"):
        (hooks / name).write_text(f'#!/bin/sh\necho "Hooked-By: {name}" >> "$1"\n')
        (hooks / name).chmod(0o755)
    Git(chain).run("config", "core.hooksPath", str(hooks))
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 0, err
    for patch in patches.glob("*.patch"):
        assert "Hooked-By" not in patch.read_text(), patch.name
    assert "Hooked-By" not in Git(chain).run("log", "--format=%B", "v0.5.16..HEAD")
    as_tester(Git(chain)).run("commit", "-q", "--allow-empty", "-m", "mine")  # the user's own commits: theirs
    assert "Hooked-By: commit-msg" in Git(chain).run("log", "-1", "--format=%B")


def test_a_commit_that_cannot_be_signed_is_named_not_called_a_conflict(sglpatch, chain, patches, tmp_path):
    """Issue 48 K: with commit.gpgsign and a gpg that cannot sign, the rebase said "0001 conflicts in the tree;
    resolve, git add the files"."""
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    git = Git(chain)
    git.run("config", "commit.gpgsign", "true")
    git.run("config", "gpg.program", "false")
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 1 and "git could not commit 0001-" in err and "gpg failed to sign" in err, err
    assert "conflict" not in err and "git add" not in err, err
    assert not git.run("status", "--porcelain", "--untracked-files=no")
    git.run("config", "commit.gpgsign", "false")
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--continue")
    assert code == 0, err
    assert git.run("rev-list", "--count", "v0.5.16..HEAD") == "2"


# -- T: the rebase's own ref folders -------------------------------------------------------------------


def test_a_finished_rebase_leaves_no_empty_ref_folder(sglpatch, chain, patches, tmp_path):
    """Issue 48 T: `.git/refs/sglpatch/` folders stayed, empty, after an abort or a finished rebase."""
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    assert rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")[0] == 0
    refs = chain / ".git" / "refs" / "sglpatch"
    assert sorted(str(p.relative_to(refs).parent) for p in refs.rglob("*") if not p.is_dir()) == ["backup"]
    assert not (refs / "rebase").exists()


def test_an_aborted_rebase_leaves_no_empty_ref_folder(sglpatch, chain, base_repo, project_pin, release_chain, tmp_path):
    line = changed_line(release_chain, OVERLAP)
    message = "[Spec] Touch a line upstream rewrites\n\nWhy: to conflict.\n\nUpstream-PR: 1\n"
    series = one_patch_series(base_repo, project_pin, tmp_path / "conflicting", message, (OVERLAP, line, line + " #"))
    assert sglpatch("apply", "--sglang", chain, "--patches", series)[0] == 0
    assert rebase(sglpatch, chain, series, tmp_path, "--onto", "v0.5.15")[0] == 1
    assert rebase(sglpatch, chain, series, tmp_path, "--abort")[0] == 0
    assert not (chain / ".git" / "refs" / "sglpatch").exists()


# -- the newcomer's list: a rebase that kept no patch, hints that name the target -----------------------


def test_revert_after_a_rebase_that_kept_no_patch_ignores_bytecode(sglpatch, chain, patches, tmp_path):
    """The record's empty file list widened revert's check to the whole package: untracked __pycache__/*.pyc
    (any import of the tree leaves them) made it refuse."""
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16", "--drop", "1,2")
    assert code == 0 and "0 of 2 patches kept" in out, (out, err)
    cache = chain / "python/sglang/srt/__pycache__"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "server_args.cpython-311.pyc").write_bytes(b"bytecode")
    code, out, err = sglpatch("revert", "--sglang", chain)
    assert code == 0, err
    assert Git(chain).current_branch() == "sglpatch/v0.5.14"
    assert (cache / "server_args.cpython-311.pyc").exists()


def test_the_rebase_hints_name_the_target_so_they_act_on_it_as_pasted(
    sglpatch, chain, base_repo, project_pin, release_chain, tmp_path, monkeypatch
):
    """The hints (CONTINUE=1, DROP=, ABORT=1) left out SGLANG=: pasted as printed they acted on build/sglang."""
    monkeypatch.setenv("SGLPATCH_FROM_MAKE", "1")
    line = changed_line(release_chain, OVERLAP)
    message = "[Spec] Touch a line upstream rewrites\n\nWhy: to conflict.\n\nUpstream-PR: 1\n"
    series = one_patch_series(base_repo, project_pin, tmp_path / "conflicting", message, (OVERLAP, line, line + " #"))
    assert sglpatch("apply", "--sglang", chain, "--patches", series)[0] == 0
    code, out, err = rebase(sglpatch, chain, series, tmp_path, "--onto", "v0.5.15")
    assert code == 1, err
    for hint in ("CONTINUE=1", "DROP=1", "ABORT=1"):
        assert f"`make rebase {hint} SGLANG={chain}`" in err, err
    code, out, err = sglpatch("status", "--sglang", chain, "--patches", series)
    assert f"`make rebase CONTINUE=1 SGLANG={chain}`" in out, out


def test_abort_removes_the_release_tag_the_rebase_made(
    sglpatch, checkout, base_repo, project_pin, release_chain, tmp_path
):
    """ABORT=1 left the tag v0.5.15 the rebase had made importing the release into the checkout."""
    line = changed_line(release_chain, OVERLAP)
    message = "[Spec] Touch a line upstream rewrites\n\nWhy: to conflict.\n\nUpstream-PR: 1\n"
    series = one_patch_series(base_repo, project_pin, tmp_path / "conflicting", message, (OVERLAP, line, line + " #"))
    assert sglpatch("apply", "--sglang", checkout, "--patches", series)[0] == 0
    before = tree_state(checkout)
    assert Git(checkout).rev_parse("refs/tags/v0.5.15") is None
    assert rebase(sglpatch, checkout, series, tmp_path, "--onto", "0.5.15")[0] == 1
    assert Git(checkout).rev_parse("refs/tags/v0.5.15") is not None
    assert rebase(sglpatch, checkout, series, tmp_path, "--abort")[0] == 0
    assert Git(checkout).rev_parse("refs/tags/v0.5.15") is None
    assert tree_state(checkout) == before


def test_a_rebase_backwards_is_refused_before_anything_is_fetched(sglpatch, checkout, patches, tmp_path):
    """Rebasing a line onto an older release than its base was not refused."""
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    before = tree_state(checkout)
    code, out, err = rebase(sglpatch, checkout, patches, tmp_path, "--onto", "0.5.13")
    assert code == 2 and "sglang 0.5.13 is older than the series' base, sglang 0.5.14" in err, err
    assert tree_state(checkout) == before
