"""The hostile trial of round 11: what round 10 left untried (two linked worktrees of one repository as two targets,
clean's mark against a folder moved into `build.deleting`, recover's advice over a folder of ignored files), and the
advice and roll-backs that meet the user's own files: paths holding spaces and `$(...)`, untracked files where a
roll-back writes, linked worktrees under build/ (docs/reliability.md, round 11).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

from sglpatch.git import Git
from testing.killed_cli import clean_cut_short
from testing.sglang_trees import BACKEND, as_tester, replace_in, stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import refused, tree_state

DROPPED_UPSTREAM = "python/sglang/version.py"  # a file no patch of the test series touches


def _rebase_args(checkout, patches, report, onto) -> tuple:
    return ("--sglang", checkout, "--patches", patches, "--report-dir", report, "--onto", onto, "--release", "0.5.14")


def test_a_rebase_in_a_second_worktree_does_not_break_the_one_stopped_in_the_first(
    sglpatch, checkout, patches, tmp_path
):
    """Two linked worktrees of one repository, the series applied in each. A rebase stops at a conflict in the
    first; one started in the second went through, and its end deleted `refs/sglpatch/rebase/series`, which the
    rebases of all worktrees share (git keeps refs/ per repository): the first's `--continue`, the user's
    resolution added, then failed at its range-diff, and again at every try, leaving only `--abort`, which drops
    the resolution. Now the second rebase is refused in one line, naming the worktree, and the first goes on."""
    git = upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report-a", "newer"))
    assert code == 1 and "conflicts in" in err, (out, err)
    second = tmp_path / "second"
    git.run("worktree", "add", "-q", "-b", "second", str(second), "main")
    theirs = tmp_path / "patches-second"
    shutil.copytree(patches, theirs)
    code, out, err = sglpatch("apply", "--sglang", second, "--patches", theirs, "--branch", "second-series")
    assert code == 0, (out, err)
    series_ref = git.run("rev-parse", "refs/sglpatch/rebase/series")
    args = ("--sglang", second, "--patches", theirs, "--report-dir", tmp_path / "report-b", "--onto", "quiet")
    err = refused(sglpatch, second, *args, "--release", "0.5.14", command="rebase")
    assert f"a rebase is in progress in {checkout}" in err and "nothing was changed" in err
    assert git.run("rev-parse", "refs/sglpatch/rebase/series") == series_ref
    subprocess.run(["git", "-C", str(checkout), "checkout", "--theirs", "--", BACKEND], check=True)
    git.run("add", BACKEND)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--continue")
    assert code == 0 and "rebased onto newer" in out, (out, err)
    code, out, err = sglpatch("rebase", *args, "--release", "0.5.14")
    assert code == 0, (out, err)  # the first settled, the second goes


def test_a_rebase_finished_in_the_same_second_as_another_takes_a_branch_name_of_its_own(
    sglpatch, checkout, patches, tmp_path, monkeypatch
):
    """A rebase whose branch name (`sglpatch/v0.5.14`) is taken names its branch by the second it finishes in. A
    second rebase (in another worktree, or the next one here) finishing in that same second picked the same name,
    which the first had made: its install found the branch "moved" and stopped half-installed, its advice "delete
    sglpatch/v0.5.14-... if you made it" (the other rebase's result, not the user's). Now it takes the next free
    name, and the branch of that name stays as it was."""
    from sglpatch.rebase import rebase_engine

    git = upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    monkeypatch.setattr(rebase_engine.time, "strftime", lambda _format: "20261205-120000")
    git.run("branch", "sglpatch/v0.5.14-20261205-120000", "main")  # made by a rebase that finished just before
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0 and "branch sglpatch/v0.5.14-20261205-120000-2" in out, (out, err)
    assert git.run("rev-parse", "sglpatch/v0.5.14-20261205-120000") == git.run("rev-parse", "main")
    assert Git(checkout).current_branch() == "sglpatch/v0.5.14-20261205-120000-2"


def test_clean_cut_short_keeps_a_folder_moved_into_what_it_left(sglpatch, series_project, tmp_path):
    """A clean killed after its look and its rename of build/ to build.deleting; then the user moves a folder of
    theirs in (a shell still in build/, now build.deleting/). The next clean compared each file's ctime with the
    mark of the look, but a file moved with its folder keeps its ctime (only the folder's changes): the folder went
    without a word, exit 0. Now a folder changed since the look, its own entries not (so not one the cut-short
    delete was emptying), is refused with the `mv -n` that keeps it all."""
    (series_project / "build" / "pr").mkdir(parents=True)
    (series_project / "build" / "pr" / "body.md").write_text("made by sglpatch\n")
    mine = tmp_path / "my-notes"
    (mine / "deep").mkdir(parents=True)
    (mine / "deep" / "notes.md").write_text("my notes\n")

    def killed(path, *args, **kwargs):
        raise KeyboardInterrupt  # stands in for the kill: nothing deleted past the rename

    clean_cut_short(sglpatch, killed)
    time.sleep(0.05)  # the user's move comes after the look, as it would
    doomed = series_project / "build.deleting"
    mine.rename(doomed / "pr" / "my-notes")
    before = tree_state(doomed)
    code, out, err = sglpatch("clean")
    assert code == 2 and err.count("\n") == 1 and "nothing was deleted" in err, (out, err)
    assert tree_state(doomed) == before


def test_recovers_advice_keeps_a_folder_of_ignored_files_that_replaced_a_file(tmp_path):
    """A tracked file replaced by a folder holding only files git ignores (a build's output, `*.so`). The advice
    kept a copy with `cat F > F.mine`, which fails on a folder, leaving an empty F.mine; and its `git checkout --
    F`, which git carries out over a folder of ignored files, deletes them. Now a folder is copied with `cp -R`,
    so the advice, followed as printed, keeps every file of it."""
    from sglpatch import hints
    from sglpatch.git import init_repo

    root = tmp_path / "checkout"
    git = as_tester(init_repo(root))
    (root / ".gitignore").write_text("*.so\n")
    (root / "kernel").write_text("x = 1\n")
    git.run("add", "-A")
    git.run("commit", "-q", "-m", "mine")
    (root / "kernel").unlink()
    (root / "kernel" / "build").mkdir(parents=True)
    (root / "kernel" / "build" / "my.so").write_bytes(b"\0my build\n")
    keep, put_back = re.findall(r"`([^`]+)`", hints.put_back_keeping_copies(root, ["kernel"]))
    run = subprocess.run(["bash", "-c", f"{keep} && {put_back}"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (root / "kernel.mine" / "build" / "my.so").read_bytes() == b"\0my build\n"
    assert (root / "kernel").read_text() == "x = 1\n"


def test_the_advice_to_save_an_edit_beside_a_stopped_rebase_keeps_a_folder_of_ignored_files(
    sglpatch, checkout, patches, tmp_path
):
    """While a rebase waits, a tracked file the stopped patch does not touch is replaced by a folder holding only
    files git ignores. --abort refuses and says how to save the change: `git diff` saves the file's deletion (not
    the ignored files), then `git checkout HEAD -- FILE` deletes the folder with them. Now the advice keeps a copy
    of such a folder first (`cp -R`), and every step of it, followed as printed, keeps the files."""
    stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    (checkout / ".git" / "info" / "exclude").write_text("*.so\n")
    folder = checkout / "python" / "sglang" / "version.py"
    folder.unlink()
    folder.mkdir()
    (folder / "my.so").write_bytes(b"\0my build\n")
    err = refused(sglpatch, checkout, "--sglang", checkout, "--abort", command="rebase")
    steps = re.findall(r"`([^`]+)`", err)[:3]
    saved = tmp_path / "saved"
    saved.mkdir()
    assert subprocess.run(["bash", "-c", " && ".join(steps)], cwd=saved).returncode == 0
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 0, err
    assert (folder.with_name("version.py.mine") / "my.so").read_bytes() == b"\0my build\n"


def test_a_second_worktree_takes_a_series_branch_beside_the_firsts(sglpatch, checkout, patches, tmp_path):
    """Two linked worktrees of one repository, the series applied in the first (branch sglpatch/v0.5.14). Applied
    in the second with `--branch sglpatch/second`, as the refusal of the taken name asks, it was refused again:
    "cannot be made beside your branch sglpatch/v0.5.14" (for-each-ref's `refs/heads/sglpatch` matches every branch
    under it), a name git makes without a word. Now it applies, and reverts, the first worktree as it was."""
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    second = tmp_path / "second"
    Git(checkout).run("worktree", "add", "-q", "-b", "second", str(second), "main")
    first = tree_state(checkout)
    code, out, err = sglpatch("apply", "--sglang", second, "--patches", patches)
    assert code == 2 and "pass --branch NAME" in err, (out, err)
    code, out, err = sglpatch("apply", "--sglang", second, "--patches", patches, "--branch", "sglpatch/second")
    assert code == 0, (out, err)
    assert sglpatch("revert", "--sglang", second)[0] == 0
    assert _outside_worktrees(tree_state(checkout)) == _outside_worktrees(first)
    assert Git(second).current_branch() == "second"


def _outside_worktrees(state: dict) -> dict:
    """A tree_state without the linked worktrees' own git dirs (their HEAD, index and logs)."""
    return {path: entry for path, entry in state.items() if not path.startswith(".git/worktrees/")}


def test_abort_does_not_write_over_a_file_made_where_onto_dropped_one(sglpatch, checkout, patches, tmp_path):
    """ONTO deletes a file the user's branch has (upstream dropped `version.py`); the rebase onto it stops at a
    conflict, and meanwhile the user writes a file of their own at that path (git does not track it there). Before:
    `--abort` went back with `git checkout -f`, which writes over untracked files in its way: the user's file
    held the branch's bytes again, "rebase aborted", exit 0. Now --abort is refused in one line, with the `mv -n`
    that keeps the file, and goes through once it is moved."""
    git = as_tester(Git(checkout))
    git.run("switch", "-q", "-c", "newer")
    replace_in(checkout / BACKEND, "class DSAIndexerMetadata", "class DSAIndexerMetadata  # upstream's\nclass _X")
    git.run("rm", "-q", DROPPED_UPSTREAM)
    git.run("commit", "-q", "-am", "upstream edits the line patch 1 changes, and drops a file")
    git.run("switch", "-q", "main")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    args = ("--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report", "--onto", "newer")
    assert sglpatch("rebase", *args)[0] == 1
    mine = checkout / DROPPED_UPSTREAM
    mine.write_text("my own version, not upstream's\n")
    err = refused(sglpatch, checkout, "--sglang", checkout, "--abort", command="rebase")
    move = re.findall(r"`(mv -n [^`]+)`", err)[0]
    subprocess.run(["bash", "-c", move], check=True, cwd=tmp_path)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 0, (out, err)
    assert mine.with_name("version.py.mine").read_text() == "my own version, not upstream's\n"
    assert Git(checkout).current_branch() == "sglpatch/v0.5.14"


def test_the_recover_and_revert_a_message_names_take_the_target_as_one_word_of_text(tmp_path, monkeypatch):
    """Every message that sends the user to recover or revert named the target unquoted (`sglpatch recover
    --sglang /data/my checkout`), where the apply and rebase hints quote it: pasted, a folder name with a space
    was two arguments (with make, `make recover SGLANG=/data/my checkout` also runs a target of that second
    word), and one with `$(...)` or `;` ran what followed. Now the path is quoted: one argument, and text."""
    from sglpatch import hints

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sglpatch").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/../args"\n')
    (bin_dir / "sglpatch").chmod(0o755)
    root = tmp_path / "my checkout $(touch RAN); touch RAN2"
    monkeypatch.delenv("SGLPATCH_FROM_MAKE", raising=False)
    for advice, command in ((hints.recover(root), "recover"), (hints.revert(root), "revert")):
        pasted = re.findall(r"`([^`]+)`", advice)[0]
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
        subprocess.run(["bash", "-c", pasted], cwd=tmp_path, env=env, check=True)
        assert (tmp_path / "args").read_text().splitlines() == [command, "--sglang", str(root)]
        assert not (tmp_path / "RAN").exists() and not (tmp_path / "RAN2").exists()


def test_the_advice_naming_a_second_worktree_or_an_untrusted_checkout_takes_its_path_as_text(
    sglpatch, checkout, patches, tmp_path
):
    """Two linked worktrees, the series branch checked out in both (`git worktree add --force`): revert is refused
    with `git -C WORKTREE switch --detach`, the path unquoted; a worktree at `wt $(touch RAN)` made the pasted
    line run `touch RAN` (and switch nothing). The same for `make pr`'s refusal, and for the `safe.directory` line
    a checkout of another user's is refused with (a folder its owner names). Now each path is quoted."""
    from sglpatch.targets.target import _unusable_checkout

    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    second = tmp_path / "wt $(touch RAN)"
    Git(checkout).run("worktree", "add", "-q", "--force", str(second), "sglpatch/v0.5.14")
    err = refused(sglpatch, checkout, "--sglang", checkout, command="revert")
    pasted = re.findall(r"`(git -C [^`]+)`", err)[0]
    subprocess.run(["bash", "-c", pasted], cwd=tmp_path, check=True, capture_output=True)
    assert not (tmp_path / "RAN").exists() and Git(second).current_branch() is None
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    line = re.findall(r"`([^`]+)`", _unusable_checkout(tmp_path / "x$(touch RAN)", "dubious ownership"))[0]
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert not (tmp_path / "RAN").exists()
    assert f"directory = {tmp_path / 'x$(touch RAN)'}" in (home / ".gitconfig").read_text()


def test_cleans_advice_for_a_linked_worktree_under_build_keeps_it_a_worktree(sglpatch, series_project, checkout):
    """build/sglang is a linked worktree of a clone of the user's (`git worktree add`), with a commit made there on a
    detached HEAD. clean refuses it, advising `mv -n build/sglang PLACE`; followed, the repository still named the
    old place, and its next `git worktree prune` (which `git gc` runs) deleted the moved worktree's HEAD and index:
    git no longer worked there, and the commit was left to the reflog. Now the advice ends with `git -C PLACE
    worktree repair`, and the worktree, its HEAD and its commit survive a prune."""
    (series_project / "build").mkdir()
    where = series_project / "build" / "sglang"
    Git(checkout).run("worktree", "add", "-q", "--detach", str(where), "HEAD")
    mine = as_tester(Git(where))
    (where / "MINE.md").write_text("my notes\n")
    mine.run("add", "MINE.md")
    mine.run("commit", "-q", "-m", "my notes")
    head = mine.run("rev-parse", "HEAD")
    code, out, err = sglpatch("clean")
    assert code == 2 and "nothing was deleted" in err, (out, err)
    move = re.findall(r"`(mv -n [^`]+)`", err)[0]
    subprocess.run(["bash", "-c", move], check=True, cwd=series_project.parent, capture_output=True)
    Git(checkout).run("worktree", "prune")
    moved = series_project.parent / "project-sglang-mine"
    assert Git(moved).run("rev-parse", "HEAD") == head


def test_cleans_advice_for_a_checkout_with_a_worktree_elsewhere_keeps_that_worktree_working(
    sglpatch, series_project, base_repo, tmp_path
):
    """build/sglang has a linked worktree of the user's outside build/, holding an edit. clean refuses, advising
    `mv -n build/sglang PLACE`; followed, the worktree's `.git` still named build/sglang/.git/worktrees/...: git no
    longer worked there (`not a git repository`), the edit out of git's reach. Now `git worktree repair` follows."""
    where = series_project / "build" / "sglang"
    where.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(base_repo), str(where)], check=True)
    outside = tmp_path / "my-worktree"
    Git(where).run("worktree", "add", "-q", "--detach", str(outside), "HEAD")
    (outside / "python" / "sglang" / "version.py").write_text("my edit\n")
    code, out, err = sglpatch("clean")
    assert code == 2 and "nothing was deleted" in err, (out, err)
    move = re.findall(r"`(mv -n [^`]+)`", err)[0]
    subprocess.run(["bash", "-c", move], check=True, cwd=series_project.parent, capture_output=True)
    assert Git(outside).run("status", "--porcelain", strip=False) == " M python/sglang/version.py\n"


def test_a_rebase_waiting_in_a_worktree_whose_folder_is_gone_is_named_with_the_prune_that_forgets_it(
    sglpatch, checkout, patches, tmp_path
):
    """The refusal above, when the other worktree's folder was deleted (`rm -rf`, not `git worktree remove`) while
    its rebase waited: advising `--continue --sglang` there would name a folder that is gone. It names `git worktree
    prune` instead, and once that is run the rebase here goes."""
    git = upstream_branches(checkout, quiet=True)
    second = tmp_path / "second"
    git.run("worktree", "add", "-q", "-b", "second", str(second), "main")
    theirs = tmp_path / "patches-second"
    shutil.copytree(patches, theirs)
    assert sglpatch("apply", "--sglang", second, "--patches", theirs, "--branch", "second-series")[0] == 0
    report = ("--report-dir", str(tmp_path / "report"))
    assert sglpatch("rebase", "--sglang", second, "--patches", theirs, *report, "--onto", "newer")[0] == 1
    shutil.rmtree(second)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    args = ("--sglang", checkout, "--patches", patches, *report, "--onto", "quiet")
    err = refused(sglpatch, checkout, *args, command="rebase")
    prune = re.findall(r"`(git -C [^`]+ worktree prune)`", err)[0]
    subprocess.run(["bash", "-c", prune], check=True)
    code, out, err = sglpatch("rebase", *args)
    assert code == 0, (out, err)
