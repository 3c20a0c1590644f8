"""The hostile trial of round 7, on real v0.5.14 checkouts: what `pr` does to PR branches the user works on,
what a rebase starts on (an apply cut short, another tool's operation waiting, a cherry-pick of several commits
the user has not finished), and the message a resolved conflict is committed with (docs/reliability.md, round 7).
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from sglpatch.git import Git
from testing.killed_cli import apply_and_its_switch_point, cli_child, point_after, python_child
from testing.pr_series import pr_project, pr_series  # noqa: F401  (pr_project: a fixture)
from testing.sglang_trees import BACKEND, as_tester, one_patch_series, upstream_branches
from testing.tree_bytes import refused, tree_state

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


@pytest.mark.parametrize("point", ["pr: branch recorded", "pr: branch moved"])
def test_a_pr_run_killed_around_its_branch_move_leaves_the_branch_its_own(
    checkout, tmp_path, base_repo, project_pin, pr_project, point  # noqa: F811  (the fixture imported above)
):
    """`make pr` killed on either side of moving its branch: the next run rebuilds it. Before, the record was
    saved after the move, and a kill between the two left a branch the next run refused as the user's."""
    v1 = pr_series(base_repo, tmp_path, project_pin, "v1")
    v2 = pr_series(base_repo, tmp_path, project_pin, "v2", first_line="VERBOSE_DEFAULT = 1")
    # the CLI in a child process (a kill ends it, not the test), on pr_project's project folder as the fixture's
    pr = ["-c", _PR_IN_PROJECT, pr_project, "pr", "--sglang", checkout, "--out", tmp_path / "bodies", "--patches"]
    trace = tmp_path / "trace"
    assert python_child(*pr, v1).returncode == 0
    assert python_child(*pr, v2, SGLPATCH_FAULT_TRACE=trace).returncode == 0
    built = Git(checkout).rev_parse(f"{FIRST_BRANCH}^{{tree}}")
    assert python_child(*pr, v1).returncode == 0  # back: the v1 branches are pr's own as well
    killed = python_child(*pr, v2, SGLPATCH_FAULT_AT=point_after(trace, point), SGLPATCH_FAULT_SIGNAL="KILL")
    assert killed.returncode == -signal.SIGKILL
    again = python_child(*pr, v2)
    assert again.returncode == 0, again.stderr
    assert Git(checkout).rev_parse(f"{FIRST_BRANCH}^{{tree}}") == built  # v2's branch (its commits' dates are new)


_PR_IN_PROJECT = (
    "import sys; from pathlib import Path; import sglpatch.commands.pr as pr; from sglpatch.cli import main; "
    "pr.PROJECT_ROOT = Path(sys.argv[1]); raise SystemExit(main(sys.argv[2:]))"
)


def _apply_killed_after_its_switch(checkout, patches, tmp_path) -> None:
    apply, point = apply_and_its_switch_point(checkout, patches, tmp_path)
    assert cli_child(*apply, SGLPATCH_FAULT_AT=point, SGLPATCH_FAULT_SIGNAL="KILL").returncode == -signal.SIGKILL


def _interactive_rebase_at_a_break(checkout, patches, tmp_path) -> None:
    """The user's own `git rebase -i` of the series branch, stopped at a `break`: clean tree, HEAD detached."""
    Git(checkout).with_env(GIT_SEQUENCE_EDITOR="sed -i '1i break'").run("rebase", "-q", "-i", "HEAD~1")


@pytest.mark.parametrize("unsettled", [_apply_killed_after_its_switch, _interactive_rebase_at_a_break])
def test_a_rebase_does_not_start_on_a_target_left_unsettled(sglpatch, checkout, patches, tmp_path, unsettled):
    """Before: `rebase --onto` read only its own state, and started over an apply killed after its switch (the
    record still "applying") and over the user's own interactive rebase waiting at a break, writing its own
    branch, refs and record over what recover (or `git rebase --continue`) was to settle."""
    upstream_branches(checkout, quiet=True)
    if unsettled is _interactive_rebase_at_a_break:
        assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    unsettled(checkout, patches, tmp_path)
    rebase = ["--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report", "--onto", "quiet"]
    err = refused(sglpatch, checkout, *rebase, command="rebase")
    assert ("was interrupted; run" if unsettled is _apply_killed_after_its_switch else "is in progress in") in err


def _unfinished_cherry_pick(checkout) -> Git:
    """On main, the user's `git cherry-pick A B C` stopped at A's conflict, resolved and committed with `git
    commit`: CHERRY_PICK_HEAD is gone, `.git/sequencer` holds B and C still to go (`git cherry-pick --continue`
    picks them). Then back on the branch it started from (git lets a switch leave that list as it is)."""
    git = as_tester(Git(checkout))
    here = git.current_branch()
    git.run("switch", "-q", "-c", "side", "main")
    for i in range(3):
        (checkout / f"note{i}.txt").write_text(f"side {i}\n")
        git.run("add", f"note{i}.txt")
        git.run("commit", "-q", "-m", f"Side note {i}")
    git.run("switch", "-q", "main")
    (checkout / "note0.txt").write_text("mine\n")
    git.run("add", "note0.txt")
    git.run("commit", "-q", "-m", "My note")
    assert git.try_run("cherry-pick", "side~2", "side~1", "side")[0] != 0
    (checkout / "note0.txt").write_text("both\n")
    git.run("add", "note0.txt")
    git.with_env(GIT_EDITOR="true").run("commit", "-q", "--no-edit")
    git.run("checkout", "-q", here)  # `git switch` refuses while a cherry-pick is in progress; checkout does not
    assert (checkout / ".git" / "sequencer" / "todo").is_file()
    return git


@pytest.mark.parametrize("command", ["apply", "rebase"])
def test_a_cherry_pick_of_several_commits_the_user_has_not_finished_is_left_alone(
    sglpatch, checkout, patches, tmp_path, command
):
    """Before: apply switched branch under it (its remaining picks would land on the series branch), and a rebase
    started; its `--abort` (`git cherry-pick --abort`) and `--drop` (`git cherry-pick --quit`) then deleted
    `.git/sequencer`, the list of the user's commits still to pick."""
    upstream_branches(checkout)
    if command == "rebase":
        assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    _unfinished_cherry_pick(checkout)
    args = ["--sglang", checkout, "--patches", patches]
    if command == "rebase":
        args += ["--report-dir", tmp_path / "report", "--onto", "newer"]
    err = refused(sglpatch, checkout, *args, command=command)
    assert "several commits is in progress" in err and "sequencer" in err, err


@pytest.mark.parametrize("comment_char", ["#", "auto"])
def test_a_resolved_conflict_keeps_the_patch_message_as_it_is(
    sglpatch, checkout, base_repo, project_pin, tmp_path, comment_char
):
    """A patch whose message has a line starting with `#` (an issue number), and a conflict the user resolves.
    Before: `--continue` committed with `git cherry-pick --continue`, which cleans the message as if edited: the
    `#1234 ...` line was dropped from the rebased patch; with core.commentChar=auto its `# Conflicts:` lines were
    written into the message instead."""
    message = (
        "[DSA] Mark the indexer metadata\n\nWhy: the indexer needs a marker.\n#1234 is the issue it fixes.\n\n"
        "What: one comment.\n\nUpstream-PR: 27166\nPatch-Group: test-group\n"
    )
    edit = (BACKEND, "class DSAIndexerMetadata", "# marked\nclass DSAIndexerMetadata")
    patches = one_patch_series(base_repo, project_pin, tmp_path / "series" / "patches", message, edit)
    git = upstream_branches(checkout)
    git.run("config", "core.commentChar", comment_char)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    rebase = ["rebase", "--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report"]
    assert sglpatch(*rebase, "--onto", "newer")[0] == 1
    text = (checkout / BACKEND).read_text()
    (checkout / BACKEND).write_text(
        re.sub(r"<<<<<<< [^\n]*\n.*?=======\n(.*?)>>>>>>> [^\n]*\n", r"\1", text, flags=re.S)
    )
    git.run("add", BACKEND)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--continue")
    assert code == 0, err
    assert git.run("log", "-1", "--format=%B") == message


@pytest.mark.usefixtures("pr_project")
def test_a_damaged_pr_record_is_a_one_line_refusal(sglpatch, checkout, tmp_path, base_repo, project_pin):
    """pr wrote `.git/sglpatch-prs.json` (the PRs it opened, what it pushed and built) in place. Before: a run
    cut short in that write left it truncated, and every later `make pr` ended in a JSONDecodeError traceback.
    Now it is written beside and renamed over; a damaged one is refused in one line, nothing written."""
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    assert _pr(sglpatch, checkout, patches, tmp_path)[0] == 0
    record = checkout / ".git" / "sglpatch-prs.json"
    assert json.loads(record.read_text())["base-group"]["built"] == Git(checkout).rev_parse(FIRST_BRANCH)
    record.write_text(record.read_text()[:20])
    err = refused(sglpatch, checkout, "--sglang", checkout, "--patches", patches, "--out", tmp_path / "b", command="pr")
    assert "sglpatch-prs.json is corrupt" in err and "nothing was changed" in err, err


@pytest.mark.usefixtures("pr_project")
def test_pr_from_a_linked_worktree_knows_the_branches_it_built_from_another(
    sglpatch, checkout, tmp_path, base_repo, project_pin
):
    """The PR branches are the repository's, shared by its worktrees, and pr kept its record in the git dir of the
    worktree it ran in: a run from a linked worktree knew neither the PRs a run from the main one opened (it would
    `gh pr create` them again) nor, with the guard above, the branches it built (refused as the user's)."""
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    assert _pr(sglpatch, checkout, patches, tmp_path)[0] == 0
    linked = tmp_path / "linked"
    as_tester(Git(checkout)).run("worktree", "add", "-q", "--detach", str(linked))
    code, out, err = _pr(sglpatch, linked, patches, tmp_path)
    assert code == 0, err


def _sparse_patterns_set_by_hand(checkout) -> None:
    """Sparse patterns (python/sglang/srt/layers) set while every file is still on disk (round 5's case, item 8)."""
    git = Git(checkout)
    git.run("config", "core.sparseCheckout", "true")
    git.run("config", "core.sparseCheckoutCone", "true")
    (checkout / ".git" / "info" / "sparse-checkout").write_text(
        "/*\n!/*/\n/python/\n!/python/*/\n/python/sglang/\n!/python/sglang/*/\n/python/sglang/srt/\n"
        "!/python/sglang/srt/*/\n/python/sglang/srt/layers/\n"
    )


@pytest.mark.parametrize("onto", ["newer", "quiet"])
def test_sparse_patterns_not_applied_to_the_work_tree_are_not_applied_by_a_rebase(
    sglpatch, checkout, patches, tmp_path, onto
):
    """Before: the rebase's `git checkout --detach ONTO` applied the patterns: 2,620 of the checkout's files left
    the disk, and `--abort` said the checkout was as it was with them still gone (a rebase that went through
    left them gone too); apply and revert had kept such patterns unapplied since round 5."""
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    _sparse_patterns_set_by_hand(checkout)
    before = tree_state(checkout)
    rebase = ["rebase", "--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report"]
    code, out, err = sglpatch(*rebase, "--onto", onto)
    if onto == "newer":  # stops at the conflict
        assert code == 1 and sglpatch("rebase", "--sglang", checkout, "--abort")[0] == 0, err
        assert tree_state(checkout) == before
    else:
        assert code == 0, err
        gone = [path for path in before if not path.startswith(".git") and not os.path.lexists(checkout / path)]
        assert gone == [], f"{len(gone)} gone, the first {gone[:3]}"


def test_a_sparse_checkout_in_effect_is_kept_by_a_rebase_and_its_abort(sglpatch, checkout, patches, tmp_path):
    """The guard beside the fix above: a sparse checkout git applied (`git sparse-checkout set`), and ONTO changing
    a file outside it: the rebase leaves that file off the disk, and `--abort` puts everything back as it was."""
    git = upstream_branches(checkout)
    git.run("switch", "-q", "newer")
    outside = checkout / "python/sglang/srt/models/glm4v_moe.py"
    outside.write_text(outside.read_text() + "# upstream's\n")
    git.run("commit", "-q", "-am", "upstream edits a file outside the sparse checkout")
    git.run("switch", "-q", "main")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    git.run("sparse-checkout", "set", "python/sglang/srt/layers")
    before = tree_state(checkout)
    rebase = ["rebase", "--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report"]
    assert sglpatch(*rebase, "--onto", "newer")[0] == 1
    assert not outside.exists()
    assert sglpatch("rebase", "--sglang", checkout, "--abort")[0] == 0
    assert tree_state(checkout) == before
