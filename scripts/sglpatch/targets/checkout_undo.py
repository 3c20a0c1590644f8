"""Take a series branch back out of a checkout: after a revert, or to settle an interrupted apply or revert."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import KEEP_SPARSE_AS_IT_IS, GitFailed
from sglpatch.output import say
from sglpatch.safety.interrupts import fault_point, write_phase
from sglpatch.targets.checkout_record import OBJECT_ID, CheckoutRecord, drop_record, replace_state, write_state
from sglpatch.targets.git_locks import GitLock
from sglpatch.targets.killed_git import settle_checkout_switch
from sglpatch.targets.space import free_reserve, make_reserve, room_to_roll_back
from sglpatch.targets.target import Target
from sglpatch.targets.worktree_bytes import back_as_it_was, give_back_stats, give_back_worktree
from sglpatch.targets.write_check import checkout_mismatch, head_mismatch, move_checkout, previous_head
from sglpatch.targets.write_states import INTERRUPTED, WriteState


def undo_checkout(target: Target, record: CheckoutRecord, locks: tuple[GitLock, ...] = ()) -> str:
    """Back to the branch the series was applied from, the series branch gone; returns the line saying so.

    For an interrupted apply or revert, `locks` are the git locks found in the checkout: those the killed
    run left are removed first (any other is refused), and series files a `git checkout` killed half-way
    left behind are put back as they were on the previous branch."""
    git = target.git
    branch, previous = record.branch, record.previous
    was = record.state
    _refuse_held_elsewhere(target, branch)
    unchanged = "still fully patched" if was == WriteState.APPLIED else "as the interrupted run left it"
    _refuse_previous_gone(target, record, unchanged)
    on_branch = git.current_branch() == branch
    with write_phase(f"the series is reverted: {target.root} is as it was (on {previous})"):
        half_switched = settle_checkout_switch(target, record, locks) if was in INTERRUPTED else []
        free_reserve(target)  # what a killed run kept aside to roll back with: this is that roll-back
        switching = on_branch and not half_switched
        if switching:
            try:
                make_reserve(target, room_to_roll_back(target, target.paths_or_package(record.touched)))
            except FatalError as exc:
                raise FatalError(f"{exc}; nothing was changed: {target.root} is {unchanged}") from None
        try:
            replace_state(target, record.with_state(WriteState.REVERTING))
        except OSError as exc:
            free_reserve(target)
            raise FatalError(
                f"cannot write {git.git_dir()} ({os_reason(exc)}); nothing was changed: {target.root} is {unchanged}"
            ) from None
        try:
            _switch_back(target, record, half_switched, switching)
        except (GitFailed, OSError) as exc:
            cause = (
                f"cannot write {exc.filename or target.root} ({os_reason(exc)})" if isinstance(exc, OSError) else exc
            )
            raise FatalError(
                f"{cause}; the revert stopped part-way (the record says reverting): free space or fix the cause, "
                f"then run {hints.recover(target.root)} to finish it"
            ) from None
    action = {
        WriteState.APPLYING: "rolled back the interrupted apply",
        WriteState.REVERTING: "finished the interrupted revert",
    }
    return f"{action.get(was, 'reverted')} on {target.root}: back on {previous}, branch {branch} removed"


def _refuse_held_elsewhere(target: Target, branch: str) -> None:
    """git deletes no branch a linked worktree has checked out (`git worktree add --force`, or a checkout with
    --ignore-other-worktrees put it there too): say so before anything changes, not half-way. The first worktree
    git lists is the main one, which git names by its git dir where that is not a `.git` folder in the work tree
    (a submodule's checkout, `git init --separate-git-dir`): when the target is the main worktree, that one is it."""
    git = target.git
    listed = git.run_bytes("worktree", "list", "--porcelain", "-z").split(b"\0")
    here, holders, where, seen = target.root.resolve(), [], None, 0
    main_is_here = git.git_dir() == git.common_dir()
    for line in listed:  # a path as the file system has it: any byte (os.fsdecode, as every path here)
        if line.startswith(b"worktree "):
            where, seen = Path(os.fsdecode(line.removeprefix(b"worktree "))), seen + 1
        elif line == os.fsencode(f"branch refs/heads/{branch}") and where is not None and where.resolve() != here:
            if not (seen == 1 and main_is_here):
                holders.append(where)
    if holders:
        raise FatalError(
            f"branch {branch} is checked out in the worktree {holders[0]} too, and git deletes no branch a worktree "
            f"has checked out; nothing was changed: switch that worktree away (`git -C {shlex.quote(str(holders[0]))} switch "
            "--detach`), then run this again"
        )


def _refuse_previous_gone(target: Target, record: CheckoutRecord, unchanged: str) -> None:
    """The branch the series was applied from must still be there to go back to: deleted since, a revert would
    stop half-way (and `git checkout` would make a new one from a remote-tracking branch of that name)."""
    previous = record.previous
    is_commit = OBJECT_ID.fullmatch(previous) is not None
    if target.git.rev_parse(previous if is_commit else f"refs/heads/{previous}") is not None:
        return
    what = f"commit {previous}" if is_commit else f"branch {previous}"
    again = (
        "" if is_commit else f": make it again (`git branch {previous} {record.base or 'COMMIT'}`), then run this again"
    )
    on = f" (on {record.branch})" if record.state == WriteState.APPLIED else ""
    raise FatalError(
        f"the {what} the series was applied from is gone; nothing was changed: {target.root} is {unchanged}{on}{again}"
    )


def _switch_back(target: Target, record: CheckoutRecord, half_switched: list[str], switching: bool) -> None:
    """The writes of a revert once its record says "reverting": HEAD and files back, branch and record gone."""
    git = target.git
    if half_switched:
        _put_back(target, record)
    elif switching:
        _, _, err = git.try_run(*KEEP_SPARSE_AS_IT_IS, "checkout", "-q", record.previous)
        fault_point("checkout: back on the previous branch")
        free_reserve(target)
        _check_switched_back(target, record, err)
    if lost := give_back_worktree(target, record.worktree, record.base):
        say(f"note: {', '.join(lost[:3])} came back as git writes them now: the bytes they had are gone from git")
    if git.rev_parse(f"refs/heads/{record.branch}") is not None:
        git.run("branch", "-q", "-D", record.branch)
        fault_point("checkout: series branch deleted")
    give_back_stats(target, record)
    drop_record(target, record)
    fault_point("checkout: state file removed")


def _put_back(target: Target, record: CheckoutRecord) -> None:
    """The previous branch's files, index and HEAD, without `git checkout` (the index and work tree disagree),
    judged by the bytes the files had before the apply (git writes them through the user's filters)."""
    still = move_checkout(target, record.previous, record.head, target.paths_or_package(record.touched))
    if still:
        still = back_as_it_was(target, record)
    if still:
        raise FatalError(
            f"could not put {target.root} back on {record.previous} after the interrupted run: {still[0]}; "
            f"fix the cause, then run {hints.recover(target.root)}"
        )
    fault_point("checkout: half-switched files put back")


def _check_switched_back(target: Target, record: CheckoutRecord, err: str) -> None:
    """After `git checkout PREVIOUS`: if git left the series' files (or HEAD) behind, go back onto the branch.
    Files git wrote otherwise than they were (its eol settings or filters of the series branch, say an includeIf
    of it) are first given back the bytes they had: a file holding them is as it was."""
    previous = record.previous
    branch, commit = previous_head(target, record)
    touched = target.paths_or_package(record.touched)
    wrong = checkout_mismatch(target, branch, commit, touched)
    if wrong and not head_mismatch(target, branch, commit):
        try:
            wrong = back_as_it_was(target, record)
        except OSError:  # git could not write them either (a read-only work tree): back onto the branch
            pass
    if not wrong:
        return
    why = next((line for line in err.splitlines() if line.startswith(("error:", "fatal:"))), "")
    cause = f"{wrong[0]}{f' (git: {why})' if why else ''}"
    still = move_checkout(target, record.branch, commit, touched)
    if still:
        raise FatalError(
            f"git could not switch {target.root} back to {previous}: {cause}; going back to {record.branch} "
            f"failed too ({still[0]}); fix the cause, then run {hints.recover(target.root)}"
        )
    write_state(target, record)
    raise FatalError(
        f"git could not switch {target.root} back to {previous}: {cause}; nothing was changed: "
        f"{target.root} is still fully patched (on {record.branch})"
    )
