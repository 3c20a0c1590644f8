"""The hostile trial of round 5, on real v0.5.14 checkouts: a revert after the user moved or deleted the branch
the series was applied from, and what the user's git settings and pending state do to apply and revert.
"""

from __future__ import annotations

import re
import subprocess

from sglpatch.git import Git
from testing.sglang_trees import BACKEND, SECOND, as_tester, stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import refused, tree_state


def test_a_revert_onto_a_previous_branch_that_moved_keeps_its_new_commit_in_the_work_tree(
    sglpatch, checkout, patches, tmp_path
):
    """The branch the series was applied from gained a commit of the user's changing a file the series touches
    (made in a linked worktree). Before: revert switched back and then wrote the file's bytes of the apply's
    time over it, so the work tree undid the user's commit (`git status`: modified)."""
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    elsewhere = tmp_path / "elsewhere"
    git = as_tester(Git(checkout))
    git.run("worktree", "add", "-q", str(elsewhere), "main")
    with open(elsewhere / BACKEND, "a") as file:
        file.write("# my own line\n")
    as_tester(Git(elsewhere)).run("commit", "-q", "-am", "My own commit")
    git.run("worktree", "remove", str(elsewhere))
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert (checkout / BACKEND).read_text().endswith("# my own line\n")
    assert git.run("status", "--porcelain") == ""


def test_a_revert_whose_previous_branch_was_deleted_is_refused_before_anything_changes(sglpatch, checkout, patches):
    """Before: revert wrote "reverting", failed in `git ls-tree main` with the whole command line, and told to run
        recover, which failed the same way for ever. (In a clone, `git checkout main` made a new main from
    origin/main instead, whatever commit that is.)"""
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    git = Git(checkout)
    base = git.run("rev-parse", "main")
    git.run("branch", "-q", "-D", "main")
    err = refused(sglpatch, checkout, "--sglang", checkout, command="revert")
    assert "branch main the series was applied from is gone" in err and f"git branch main {base}" in err, err
    assert "still fully patched" in err, err
    git.run("branch", "main", base)
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert git.current_branch() == "main"


def test_a_checkout_that_is_a_submodule_is_reverted(sglpatch, base_repo, patches, tmp_path):
    """sglang as a submodule of the user's project: its .git is a file naming `.git/modules/sglang`, and
    `git worktree list` names the main worktree by that git dir. Before: revert took it for another worktree
    holding the series branch and refused for ever, advising a `git switch --detach` there."""
    project = tmp_path / "project"
    Git(tmp_path).run("init", "-q", str(project))
    mine = as_tester(Git(project))
    mine.run("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(base_repo), "sglang")
    mine.run("commit", "-q", "-m", "sglang as a submodule")
    checkout = project / "sglang"
    before = tree_state(checkout)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert tree_state(checkout) == before
    assert mine.run("status", "--porcelain") == ""


def test_a_git_ignored_file_where_onto_has_one_stops_the_rebase_before_it_starts(sglpatch, checkout, patches, tmp_path):
    """ONTO adds a file where the user keeps a git-ignored one (a local config, say). Before: `git checkout
    --detach ONTO` overwrote it without a word and the rebase went through: its bytes were gone (an untracked
    file instead made git refuse, and the rebase was rolled back)."""
    git = as_tester(Git(checkout))
    git.run("switch", "-q", "-c", "newer")
    added = checkout / "python/sglang/local_settings.py"
    added.write_text("UPSTREAM = 1\n")
    git.run("add", str(added))
    git.run("commit", "-q", "-m", "upstream adds local_settings.py")
    git.run("switch", "-q", "main")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    with open(checkout / ".git/info/exclude", "a") as exclude:
        exclude.write("python/sglang/local_settings.py\n")
    added.write_text("MY_TOKEN_FILE = 'mine'\n")
    before = tree_state(patches)
    err = refused(
        sglpatch,
        checkout,
        "--sglang",
        checkout,
        "--patches",
        patches,
        "--report-dir",
        tmp_path / "report",
        "--onto",
        "newer",
        command="rebase",
    )
    assert f"{added} is there already (untracked or git-ignored file)" in err and "onto newer" in err, err
    assert tree_state(patches) == before and not (tmp_path / "report").exists()


def test_abort_and_drop_refuse_to_throw_away_an_edit_the_stopped_patch_does_not_touch(
    sglpatch, checkout, patches, tmp_path
):
    """While the rebase waited at a conflict the user edited another file. Before: --abort (`git checkout -f`)
    and --drop (`git reset --hard`) threw the edit away without a word."""
    stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    with open(checkout / SECOND, "a") as file:
        file.write("# my notes\n")
    for option in (["--abort"], ["--drop", "1"]):
        err = refused(sglpatch, checkout, "--sglang", checkout, *option, command="rebase")
        assert f"{SECOND} changed while the rebase waited" in err and "nothing was changed" in err, err
    assert (checkout / SECOND).read_text().endswith("# my notes\n")
    # the advice, run as printed from another folder, where a file of the name is the user's already: it is
    # not overwritten; then from a fresh folder it saves the edit, and --abort goes through
    save, put_back = re.findall(r"`([^`]+)`", err)[:2]
    theirs = tmp_path / "mine"
    theirs.mkdir()
    (theirs / "my-changes.patch").write_text("the user's own\n")
    assert subprocess.run(["bash", "-c", save], cwd=theirs).returncode != 0
    assert (theirs / "my-changes.patch").read_text() == "the user's own\n"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert subprocess.run(["bash", "-c", f"{save} && {put_back}"], cwd=fresh).returncode == 0
    assert "+# my notes" in (fresh / "my-changes.patch").read_text()
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 0, err


def test_abort_keeps_the_commits_made_while_the_rebase_waited(sglpatch, checkout, patches, tmp_path):
    """The user resolved the conflict and committed, then a commit of their own, then chose --abort. Before: back
    on the original branch, both commits were left on a detached HEAD nothing named (`checkout -q` hid git's
    warning)."""
    git = stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    git.run("checkout", "--theirs", BACKEND)
    git.run("add", BACKEND)
    git.run("commit", "-q", "-m", "my resolution")
    with open(checkout / SECOND, "a") as file:
        file.write("# my notes\n")
    git.run("commit", "-q", "-am", "my own commit")
    mine = git.run("rev-parse", "HEAD")
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 0, err
    kept = f"refs/sglpatch/backup/aborted-{mine[:12]}"
    assert kept in out and git.run("rev-parse", kept) == mine, out
    assert git.current_branch() == "sglpatch/v0.5.14"


def test_a_tag_named_like_the_branch_is_no_other_branch(sglpatch, checkout, patches):
    """A tag `main` beside the branch main (and one named like the series branch): git's short name for HEAD's
    branch is then `heads/main`. Before: apply said git "left it unwritten: HEAD is on heads/sglpatch/v0.5.14",
    could not roll back (HEAD left detached, branch and record left), and recover could not either."""
    git = Git(checkout)
    git.run("tag", "main")
    git.run("tag", "sglpatch/v0.5.14")
    before = tree_state(checkout)
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, err
    assert git.current_branch() == "sglpatch/v0.5.14"
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0 and "back on main" in out, err
    assert tree_state(checkout) == before


def test_drop_keeps_the_commits_made_while_the_rebase_waited(sglpatch, checkout, patches, tmp_path):
    """The user committed a resolution of the stopped patch, then chose to leave that patch out after all.
    Before: --drop reset past the commit (`git reset --hard` to where the patch went onto), which nothing named."""
    git = stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    git.run("checkout", "--theirs", BACKEND)
    git.run("add", BACKEND)
    git.run("commit", "-q", "-m", "my resolution")
    mine = git.run("rev-parse", "HEAD")
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--drop", "1")
    kept = f"refs/sglpatch/backup/dropped-{mine[:12]}"
    assert code == 0 and kept in out and git.run("rev-parse", kept) == mine, (code, out, err)


def test_a_post_checkout_hook_that_rewrites_a_series_file_is_rolled_back(sglpatch, checkout, patches):
    """The user's post-checkout hook stamps a file the series touches (a version line, say). Before: apply found
    the file not as committed and rolled back, but the roll-back's `git checkout COMMIT -- PATHS` ran the hook
    again: "rolling back failed too", the branch and record left, the file stamped, and recover failed for ever."""
    hooks = checkout / ".git/hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "post-checkout").write_text(f'#!/bin/sh\ngrep -q "# stamped" {BACKEND} || echo "# stamped" >> {BACKEND}\n')
    (hooks / "post-checkout").chmod(0o755)
    err = refused(sglpatch, checkout, "--sglang", checkout, "--patches", patches)
    assert f"{BACKEND} is not as committed" in err and "rolled back, nothing changed" in err, err


def _stamping_hook(checkout) -> None:
    """A post-checkout hook of the user's that stamps a file the series touches, once."""
    hooks = checkout / ".git/hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "post-checkout").write_text(f'#!/bin/sh\ngrep -q "# stamped" {BACKEND} || echo "# stamped" >> {BACKEND}\n')
    (hooks / "post-checkout").chmod(0o755)


def test_a_post_checkout_hook_runs_in_neither_the_rebase_checkout_of_onto_nor_the_abort(
    sglpatch, checkout, patches, tmp_path
):
    """Before: the rebase's `git checkout --detach ONTO` ran the user's post-checkout hook, which stamped a series
    file: the first pick stopped ("your local changes would be overwritten"); and --abort's `git checkout -f`
    back ran it again, leaving the file stamped on the user's branch."""
    git = upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    _stamping_hook(checkout)
    before = tree_state(checkout)
    code, out, err = sglpatch(
        "rebase", "--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report", "--onto", "newer"
    )
    assert code == 1 and "conflicts in" in err, (out, err)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 0, err
    assert tree_state(checkout) == before
    code, out, err = sglpatch(
        "rebase", "--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report2", "--onto", "quiet"
    )
    assert code == 0, (out, err)
    assert "# stamped" not in git.run("show", f"HEAD:{BACKEND}")


def test_a_replace_ref_for_a_blob_the_series_touches_changes_nothing(sglpatch, checkout, patches):
    """`git replace` names another blob for the one HEAD holds at a series file. Before: apply built on the
    replacement's bytes, and revert refused for ever ("could not switch back ...: not as committed")."""
    git = as_tester(Git(checkout))
    old = git.run("rev-parse", f"HEAD:{BACKEND}")
    new = git.run_with_input(["hash-object", "-w", "--stdin"], (checkout / BACKEND).read_bytes() + b"# replaced\n")
    git.run("replace", old, new)
    before = tree_state(checkout)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    assert "# replaced" not in (checkout / BACKEND).read_text()
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert tree_state(checkout) == before
