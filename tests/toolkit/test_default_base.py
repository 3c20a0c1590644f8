"""`make apply` with no argument: the pinned wheel, cached, laid out as a git repo, patched."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

import pytest

from sglpatch.git import Git, init_repo
from sglpatch.targets import checkout_at, target_lock
from sglpatch.wheels import cache_dir
from testing.sglang_trees import SECOND, TESTER_IDENTITY, as_tester
from testing.tree_bytes import tree_state


@pytest.fixture
def project(series_project):
    return series_project


def test_first_run_builds_the_base_then_applies(sglpatch, project, project_pin):
    code, out, err = sglpatch("apply")
    assert code == 0, err
    base = project / "build" / "sglang"
    git = Git(base)
    assert git.rev_parse("v0.5.14") is not None
    assert (
        git.run("log", "-1", "--format=%an|%aI", "v0.5.14") == "sglang release (PyPI wheel)|2026-06-25T00:00:00+00:00"
    )
    assert git.run("rev-list", "--count", "v0.5.14..HEAD") == "2"
    for path, blob in project_pin.blobs.items():
        status, found, _ = git.try_run("rev-parse", f"v0.5.14:{path}")
        assert (found if status == 0 else "") == blob  # "": a file the series creates
    assert "downloading" not in err  # the session's wheel is already cached


def test_second_run_is_a_no_op(sglpatch, project):
    assert sglpatch("apply")[0] == 0
    head = Git(project / "build" / "sglang").run("rev-parse", "HEAD")
    code, out, err = sglpatch("apply")
    assert code == 0 and out.splitlines()[-1].startswith("already applied")
    assert Git(project / "build" / "sglang").run("rev-parse", "HEAD") == head


def test_an_earlier_series_on_the_default_base_is_taken_out_first(sglpatch, project, project_pin):
    """After patches/ changes (a pull, an export), `make apply` and `make test` must not refuse their own base."""
    assert sglpatch("apply")[0] == 0
    base = Git(project / "build" / "sglang")
    _revise_the_second_patch(project)
    code, out, err = sglpatch("apply")
    assert code == 0, err
    assert "carries an earlier version of the series: taking it out first" in out
    assert "second patch, revised" in (project / "build" / "sglang" / "python/sglang/global_config.py").read_text()
    assert base.run("rev-list", "--count", "v0.5.14..HEAD") == "2"
    assert sglpatch("apply")[1].splitlines()[-1].startswith("already applied")


def _revise_the_second_patch(project) -> None:
    """patches/ changes under an applied default base (a pull, an export): its second patch says more."""
    line = project / "patches" / "v0.5.14"
    second = line / sorted(p.name for p in line.glob("0002-*.patch"))[0]
    text = second.read_text()
    assert "# test series: second patch" in text
    second.write_text(text.replace("# test series: second patch", "# test series: second patch, revised"))
    sums = line / "SHA256SUMS"
    digest = hashlib.sha256(second.read_bytes()).hexdigest()
    sums.write_text(
        "".join(
            f"{digest}  {second.name}\n" if line.endswith(second.name) else line + "\n"
            for line in sums.read_text().splitlines()
        )
    )


def _work_of_your_own(base, work: str) -> str:
    """Leave work of the user's in the applied default base; returns the text that must survive (in a file)."""
    git = as_tester(Git(base))
    mine = base / "python/sglang/my_notes.py"
    if work == "commit-on-the-series":
        mine.write_text("MINE = 1\n")
        git.run("add", "python/sglang/my_notes.py")
        git.run("commit", "-q", "-m", "My own commit on the series branch")
    elif work == "commit-on-a-branch":
        git.run("checkout", "-q", "-b", "my-work")
        mine.write_text("MINE = 1\n")
        git.run("add", "python/sglang/my_notes.py")
        git.run("commit", "-q", "-m", "My own commit on a branch of mine")
    elif work == "edit":
        (base / SECOND).write_text((base / SECOND).read_text() + "MINE = 1\n")
        return SECOND
    return "python/sglang/my_notes.py"


@pytest.mark.parametrize("work", ["commit-on-the-series", "commit-on-a-branch", "edit"])
def test_work_of_your_own_in_the_default_base_is_kept_by_what_apply_says(sglpatch, project, work):
    """Issue 48 A: apply advised `make clean` (rm -rf build), which deleted the user's commit or edit. It names
    what is there, changes nothing, and what it says to run keeps the work."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    kept = _work_of_your_own(base, work)
    _revise_the_second_patch(project)
    before = tree_state(base)
    code, out, err = sglpatch("apply")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert "make clean" not in err and "rm " not in err, err
    assert tree_state(base) == before
    what = {"edit": SECOND, "commit-on-the-series": "My own commit", "commit-on-a-branch": "my-work"}[work]
    assert what in err, err
    moves = re.findall(r"`(mv [^`]+)`", err)
    assert len(moves) == 1, err
    subprocess.run(moves[0], shell=True, check=True, cwd=project.parent)  # as printed, from elsewhere
    assert not base.exists()
    moved = [p for p in project.parent.rglob(kept) if base not in p.parents]
    assert len(moved) == 1 and "MINE = 1" in moved[0].read_text()
    code, out, err = sglpatch("apply")
    assert code == 0, err
    assert "second patch, revised" in (base / SECOND).read_text()


def test_the_base_commit_is_the_same_on_every_machine(sglpatch, project, base_repo):
    sglpatch("apply")
    assert Git(project / "build" / "sglang").rev_parse("v0.5.14") == Git(base_repo).rev_parse("v0.5.14")


@pytest.mark.network  # downloads the pinned wheel into an empty cache
def test_wheel_with_wrong_checksum_is_refused(sglpatch, project, monkeypatch, tmp_path):
    pin = json.loads((project / "patches" / "v0.5.14" / "pin.json").read_text())
    pin["wheel"]["sha256"] = "0" * 64
    (project / "patches" / "v0.5.14" / "pin.json").write_text(json.dumps(pin))
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "empty-cache"))
    code, _, err = sglpatch("apply")
    assert code == 2 and "checksum mismatch" in err
    assert not (project / "build" / "sglang").exists()
    assert not list((tmp_path / "empty-cache" / "wheels").glob("*.whl"))
    assert cache_dir() == tmp_path / "empty-cache"


@pytest.mark.network  # downloads the pinned wheel into an empty cache
def test_download_messages_do_not_carry_the_home_path(sglpatch, project, monkeypatch, tmp_path):
    home = tmp_path / "home-of-someone"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SGLPATCH_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    pin = json.loads((project / "patches" / "v0.5.14" / "pin.json").read_text())
    pin["wheel"]["sha256"] = "1" * 64  # refused after the download, so nothing is built
    (project / "patches" / "v0.5.14" / "pin.json").write_text(json.dumps(pin))
    code, out, err = sglpatch("apply")
    assert code == 2 and "cached in ~/.cache/sglpatch/wheels" in err
    assert str(home) not in out + err


# -- make clean: build/ goes, unless a checkout there holds work of the user's ----------------------------


@pytest.mark.parametrize("identity", ["none", "the user's"])
def test_clean_deletes_build_as_sglpatch_left_it(sglpatch, project, monkeypatch, identity):
    """The default base after an apply, after an earlier series was taken out and the new one applied, and the
    reports beside it: all sglpatch's. With the user's identity the series' commits are the user's committer's:
    the record names them."""
    if identity != "none":
        for key, value in TESTER_IDENTITY.items():
            monkeypatch.setenv(key, value)
    assert sglpatch("apply")[0] == 0
    _revise_the_second_patch(project)
    assert sglpatch("apply")[0] == 0
    (project / "build" / "drift" / "v0.5.14").mkdir(parents=True)
    (project / "build" / "drift" / "v0.5.14" / "drift.md").write_text("a report\n")
    partial = project / "build" / "sglang-v0.5.23.partial"  # a layout cut short: a repo of untracked files
    init_repo(partial)
    (partial / "python").mkdir()
    (partial / "python" / "laid_out.py").write_text("half\n")
    code, out, err = sglpatch("clean")
    assert code == 0, err
    assert not (project / "build").exists() and "removing" in out


def _more_work_of_your_own(base, work: str) -> str:
    """Work of the user's that no branch or work-tree file shows; returns the text the printed move keeps."""
    git = as_tester(Git(base))
    mine = base / "python/sglang/my_notes.py"
    mine.write_text("MINE = 1\n")
    if work == "untracked":
        return "untracked python/sglang/my_notes.py"
    if work == "stash":
        git.run("stash", "-q", "-u")
        return "1 stash"
    git.run("add", "python/sglang/my_notes.py")
    git.run("commit", "-q", "-m", "My own commit")
    if work == "a tag":
        git.run("tag", "mine")
    elif work == "kept by a rebase":
        git.run("update-ref", "refs/sglpatch/backup/aborted-0123456789ab", "HEAD")
    elif work == "a linked worktree":
        git.run("worktree", "add", "-q", "--detach", str(base.parent.parent / "my-worktree"), "HEAD")
    git.run("reset", "-q", "--hard", "HEAD~1")
    return "1 linked worktree" if work == "a linked worktree" else "1 commit not made by sglpatch, the last"


@pytest.mark.parametrize(
    "work",
    ["commit-on-the-series", "commit-on-a-branch", "edit", "untracked", "stash", "a tag", "kept by a rebase"]
    + ["a linked worktree"],
)
def test_clean_refuses_work_of_your_own_and_its_advice_keeps_it(sglpatch, project, work):
    """`make clean` deleted build/ whatever the default base held: a commit of the user's there (to export a
    patch from), a stash, an edit. It names the work, deletes nothing, and the move it prints keeps it."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    if work in ("commit-on-the-series", "commit-on-a-branch", "edit"):
        _work_of_your_own(base, work)
        said = {"edit": f"edits to {SECOND}", "commit-on-the-series": "My own commit on the series branch"}
        said = said.get(work, "My own commit on a branch of mine")
    else:
        said = _more_work_of_your_own(base, work)
    (project / "build" / "drift").mkdir()
    before = tree_state(base)
    code, out, err = sglpatch("clean")
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert said in err and "nothing was deleted" in err, err
    assert tree_state(base) == before and (project / "build" / "drift").is_dir()
    moves = re.findall(r"`(mv [^`]+)`", err)
    assert len(moves) == 1, err
    subprocess.run(moves[0], shell=True, check=True, cwd=project.parent)
    assert sglpatch("clean")[0] == 0 and not (project / "build").exists()
    assert tree_state(project.parent / "project-sglang-mine") == before  # every byte, ref and stash moved


def test_clean_waits_for_no_run_and_leaves_a_link_where_it_points(sglpatch, project, tmp_path):
    """A run working on the default base (its lock held) is never deleted under; build/ as a link to a folder
    elsewhere goes as `rm -rf build` took it: the link, not the folder."""
    assert sglpatch("apply")[0] == 0
    base = project / "build" / "sglang"
    with target_lock(checkout_at(base)):
        code, out, err = sglpatch("clean")
    assert code == 2 and "another sglpatch run is working on" in err and base.is_dir(), err
    elsewhere = tmp_path / "elsewhere"
    (project / "build").rename(elsewhere)
    (project / "build").symlink_to(elsewhere)
    assert sglpatch("clean")[0] == 0
    assert not (project / "build").is_symlink() and (elsewhere / "sglang" / ".git").is_dir()
    elsewhere.rename(project / "build.deleting")  # a clean killed after it looked and renamed, before it deleted
    code, out, err = sglpatch("clean")
    assert code == 0 and "left by a clean cut short" in out and not (project / "build.deleting").exists(), err


def test_clean_names_a_repository_of_yours_with_no_commit_yet(sglpatch, project):
    """A `git init` of the user's in build/ holding files it never committed: git has no revision to list there."""
    mine = project / "build" / "mine"
    init_repo(mine)
    (mine / "notes.txt").write_text("mine\n")
    code, out, err = sglpatch("clean")
    assert code == 2 and "build/mine holds untracked notes.txt" in err and "cannot read" not in err, err
    assert (mine / "notes.txt").read_text() == "mine\n"
