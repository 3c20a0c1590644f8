"""`make clean` (`sglpatch clean`) on the cases a hostile trial found: work of the user's it deleted, a base of
sglpatch's it could not look at, a leftover it could never settle."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from sglpatch.git import Git
from testing.sglang_trees import OVERLAP, TESTER_IDENTITY, as_tester, changed_line, one_patch_series
from testing.tree_bytes import tree_state


@pytest.fixture
def project(series_project):
    return series_project


def _refused(sglpatch, project, base, said: str) -> None:
    """clean refuses in one line naming `said`, the tree as it was; the `mv` it prints keeps every byte."""
    before = tree_state(base)
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert said in err and "nothing was deleted" in err, err
    assert tree_state(base) == before
    moves = re.findall(r"`(mv [^`]+)`", err)
    assert len(moves) == 1, err
    subprocess.run(moves[0], shell=True, check=True, cwd=project.parent)
    assert sglpatch("clean")[0] == 0 and not (project / "build").exists()
    assert tree_state(project.parent / f"project-{base.name}-mine") == before


@pytest.mark.network  # release 0.5.15 from PyPI, unless cached
def test_clean_keeps_a_resolution_the_rebase_kept_for_a_user_with_no_git_identity(
    sglpatch, tmp_path, monkeypatch, base_repo, project_pin, release_chain
):
    """With no git identity, the rebase commits the user's resolution as sglpatch; a `--continue` cut short
    rolled back and kept it under refs/sglpatch/backup/resolved-*, saying so, and clean took sglpatch's
    identity for sglpatch's work and deleted it."""
    project = tmp_path / "project"
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", project)
    line = changed_line(release_chain, OVERLAP)
    message = "[Spec] One patch for the line\n\nWhy: a line of one patch.\n\nUpstream-PR: 1\n"
    one_patch_series(base_repo, project_pin, project / "patches" / "v0.5.14", message, (OVERLAP, line, line + "  #"))
    assert sglpatch("apply")[0] == 0
    assert sglpatch("rebase", "--onto", "0.5.15", "--report-dir", project / "report")[0] == 1
    base = project / "build" / "sglang"
    git = Git(base)
    git.run("checkout", "--theirs", "--", OVERLAP)
    git.run("add", OVERLAP)
    killed = subprocess.run(
        [sys.executable, "-m", "sglpatch", "rebase", "--continue", "--report-dir", str(project / "report")],
        capture_output=True,
        text=True,
        env={**os.environ, "SGLPATCH_PROJECT": str(project), "SGLPATCH_FAULT_AT": "1", "SGLPATCH_FAULT_SIGNAL": "TERM"},
    )
    assert killed.returncode == 143 and "refs/sglpatch/backup/resolved-" in killed.stderr, killed.stderr
    kept = git.run("for-each-ref", "--format=%(refname)", "refs/sglpatch/backup/resolved-*")
    assert git.run("log", "-1", "--format=%ce", kept) == "sglpatch@localhost"
    _refused(sglpatch, project, base, "1 commit not made by sglpatch")


def test_clean_looks_at_a_repo_inside_a_checkout(sglpatch, project):
    """Only the outer checkout was looked at: a repo of the user's inside it, in a folder git ignores there,
    went with it, commits and all."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    (base / ".git" / "info" / "exclude").write_text("scratch/\n")
    inner = as_tester(Git(base / "scratch" / "tool"))
    (base / "scratch" / "tool").mkdir(parents=True)
    inner.run("init", "-q")
    (base / "scratch" / "tool" / "notes.txt").write_text("mine\n")
    inner.run("add", "notes.txt")
    inner.run("commit", "-q", "-m", "My own tool")
    assert not Git(base).run("status", "--porcelain")
    before = tree_state(base)
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "My own tool" in err, (out, err)
    assert "build/sglang/scratch/tool holds" in err and tree_state(base) == before


def test_clean_looks_at_a_checkout_with_many_refs_in_time(sglpatch, project):
    """A base where the user fetched every pull request's ref (refs/remotes/): the look compared each ref with
    every one of sglpatch's (17 s for 60,000), then passed them all on one command line, past what the system
    takes ("Argument list too long"): refused."""
    assert sglpatch("apply")[0] == 0
    git = Git(project / "build" / "sglang")
    head = git.rev_parse("HEAD")
    refs = sorted(f"refs/remotes/origin/pull/{n}/head" for n in range(70_000))
    (git.git_dir() / "packed-refs").write_text("".join(f"{head} {ref}\n" for ref in refs))
    code, out, err = sglpatch("clean")
    assert code == 0 and not (project / "build").exists(), err


@pytest.mark.parametrize("what", ["file", "link", "dangling link"])
def test_clean_names_what_is_in_the_way_of_its_rename(sglpatch, project, tmp_path, what):
    """A file or link named build.deleting is nothing clean left: it said "left by a clean cut short", then
    failed on it ("Not a directory", "Cannot call rmtree on a symbolic link") at every run."""
    assert sglpatch("apply")[0] == 0
    doomed = project / "build.deleting"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.txt").write_text("mine\n")
    if what == "file":
        doomed.write_text("mine\n")
    else:
        doomed.symlink_to(elsewhere if what == "link" else tmp_path / "gone")
    before = tree_state(project)
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert "build.deleting" in err and "nothing was deleted" in err and "cut short" not in out, (out, err)
    assert tree_state(project) == before and (elsewhere / "mine.txt").read_text() == "mine\n"
    doomed.rename(tmp_path / "moved")
    assert sglpatch("clean")[0] == 0 and not (project / "build").exists()


def test_clean_deletes_the_pr_branches_make_pr_built_on_the_default_base(
    sglpatch, line_project, pr_project, tmp_path, monkeypatch
):
    """`make pr` without SGLANG builds each group's branch on the line's default base, its commits made with
    the user's identity: clean called them "2 commits not made by sglpatch" and refused. A commit of the user's
    on a PR branch is still theirs."""
    for key, value in TESTER_IDENTITY.items():
        monkeypatch.setenv(key, value)
    project = line_project.parents[1]
    assert sglpatch("pr", "--out", tmp_path / "bodies")[0] == 0
    code, out, err = sglpatch("clean")
    assert code == 0 and not (project / "build").exists(), err
    assert sglpatch("pr", "--out", tmp_path / "bodies")[0] == 0
    base = project / "build" / "sglang"
    git = Git(base)
    git.run("checkout", "-q", "sglpatch-pr/test-first-group")
    (base / "review_fix.py").write_text("FIX = 1\n")
    git.run("add", "review_fix.py")
    git.run("commit", "-q", "-m", "A review fix of mine")
    git.run("checkout", "-q", "--detach", "HEAD~1")
    _refused(sglpatch, project, base, "1 commit not made by sglpatch, the last")


@pytest.fixture
def undeletable(tmp_path):
    """Makes a folder this user cannot delete from: read-only, or immutable where the tests run as root."""

    def make(folder):
        if os.geteuid() != 0:
            folder.chmod(0o555)
        elif subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("root deletes from any folder, and chattr +i is not allowed here")

    yield make
    undo = ["chmod", "-R", "u+w"] if os.geteuid() != 0 else ["chattr", "-R", "-i"]
    subprocess.run([*undo, str(tmp_path)], capture_output=True)  # wherever the folder went


def test_clean_deletes_nothing_where_a_folder_cannot_be_deleted_from(sglpatch, project, undeletable):
    """A folder of root's under build/ (a GPU run in a container) stopped the delete part-way: build/ was
    renamed and half gone, the error named a bare file name, and every clean after it failed the same way."""
    assert sglpatch("apply")[0] == 0
    jit = project / "build" / "engine" / "jit"
    jit.mkdir(parents=True)
    (jit / "kernel.so").write_bytes(b"built\n")
    undeletable(jit)
    before = tree_state(project)
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert f"{jit} is a folder of" in err and "nothing was deleted" in err and "chown -R" in err, err
    assert tree_state(project) == before


@pytest.mark.parametrize("tag", ["annotated", "of a file"])
def test_clean_keeps_a_tag_of_the_users_on_what_sglpatch_made(sglpatch, project, tag):
    """Only commits were looked for: an annotated tag on the series' last commit (its message the user's
    notes), or a tag of a file of the user's, went with build/."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    git = as_tester(Git(base))
    if tag == "annotated":
        git.run("tag", "-a", "-m", "Measured on H200: 1.4x", "h200-run", "HEAD")
    else:
        git.run("tag", "my-notes", git.run("hash-object", "-w", "--stdin", stdin=b"my notes\n"))
    _refused(
        sglpatch,
        project,
        base,
        f"1 tag of a message, tree or file of yours ({'h200-run' if tag == 'annotated' else 'my-notes'})",
    )


def test_clean_passes_the_worktrees_of_a_killed_check_whose_folders_are_gone(sglpatch, project, tmp_path):
    """check-patches killed (-9, or out of memory) leaves its prefix worktrees registered; once their temporary
    folder is gone (a reboot, a new container) git calls them prunable, and clean refused "3 linked worktrees"
    at every run. A commit of the user's that only such a worktree's HEAD holds is still looked for."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    git = as_tester(Git(base))
    scratch = tmp_path / "sglpatch-check-x"
    for k in range(3):
        git.run("worktree", "add", "-q", "--detach", str(scratch / f"prefix-{k}"), f"HEAD~{k}")
    shutil.rmtree(scratch)
    code, out, err = sglpatch("clean")
    assert code == 0 and not (project / "build").exists(), err
    assert sglpatch("apply")[0] == 0
    git.run("worktree", "add", "-q", "--detach", str(scratch / "mine"), "HEAD")
    (scratch / "mine" / "notes.txt").write_text("mine\n")
    Git(scratch / "mine").with_env(**TESTER_IDENTITY).run("add", "notes.txt")
    Git(scratch / "mine").with_env(**TESTER_IDENTITY).run("commit", "-q", "-m", "Only in a worktree")
    shutil.rmtree(scratch)
    _refused(sglpatch, project, base, "1 commit not made by sglpatch, the last")


def test_clean_advises_a_place_of_its_own_for_each_checkout_it_keeps(sglpatch, project):
    """Two checkouts of one name under build/ (build/sglang, build/old/sglang) were both advised
    `mv -n … project-sglang-mine`: the second `mv` put the one checkout inside the other's work tree."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    (base / "mine.txt").write_text("mine\n")
    old = project / "build" / "old" / "sglang"
    shutil.copytree(base, old, symlinks=True)
    before = {base: tree_state(base), old: tree_state(old)}
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    moves = re.findall(r"`(mv [^`]+)`", err)
    assert len(moves) == 2, err
    for move in moves:
        subprocess.run(move, shell=True, check=True, cwd=project.parent)
    assert sglpatch("clean")[0] == 0 and not (project / "build").exists()
    kept = [tree_state(place) for place in sorted(project.parent.glob("project-sglang-mine*"))]
    assert len(kept) == 2 and all(each in before.values() for each in kept)


@pytest.mark.skipif(os.geteuid() != 0, reason="a checkout of another user's is made with chown, as root")
def test_clean_names_a_checkout_of_another_users_as_such(sglpatch, project):
    """Root cleaning a project of a host user's (a container): git will not read the checkouts, and clean said
    only that `git rev-parse` failed, `sglpatch -v` showing why."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    subprocess.run(["chown", "-R", "65534", str(base)], check=True)
    before = tree_state(base)
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert "another user's, which git will not read" in err and "safe.directory" in err and "-v" not in err, err
    assert tree_state(base) == before


def test_clean_keeps_a_repository_with_no_work_tree(sglpatch, project):
    """A bare repository has no .git: clean did not see it. The user's branch pushed there from the default
    base, its commit held in the base only by a remote's ref (`elsewhere`), went with both."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    backup = project / "build" / "backup.git"
    git = as_tester(Git(base))
    git.run("init", "-q", "--bare", str(backup))
    git.run("checkout", "-q", "-b", "mine")
    (base / "notes.txt").write_text("mine\n")
    git.run("add", "notes.txt")
    git.run("commit", "-q", "-m", "My own work")
    git.run("push", "-q", str(backup), "mine")
    git.run("fetch", "-q", str(backup), "+refs/heads/*:refs/remotes/backup/*")
    git.run("checkout", "-q", "sglpatch/v0.5.14")
    git.run("branch", "-q", "-D", "mine")
    _refused(sglpatch, project, backup, "a git repository with no work tree")
