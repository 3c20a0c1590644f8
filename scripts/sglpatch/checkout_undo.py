"""Take a series branch back out of a checkout: after a revert, or to settle an interrupted apply or revert."""

from __future__ import annotations

from sglpatch import hints
from sglpatch.checkout_record import STATE_FILE, CheckoutRecord, drop_record, write_state
from sglpatch.errors import FatalError
from sglpatch.git_locks import GitLock, refuse_others, remove_own
from sglpatch.interrupts import fault_point, write_phase
from sglpatch.plan import dirty_paths
from sglpatch.target import Target
from sglpatch.write_check import checkout_mismatch, move_checkout, tree_blobs
from sglpatch.write_states import INTERRUPTED, WriteState


def undo_checkout(target: Target, record: CheckoutRecord, locks: tuple[GitLock, ...] = ()) -> str:
    """Back to the branch the series was applied from, the series branch gone; returns the line saying so.

    For an interrupted apply or revert, `locks` are the git locks found in the checkout: those the killed
    run left are removed first (any other is refused), and series files a `git checkout` killed half-way
    left behind are put back as they were on the previous branch."""
    git = target.git
    branch, previous = record.branch, record.previous
    was = record.state
    on_branch = git.current_branch() == branch
    with write_phase(f"the series is reverted: {target.root} is as it was (on {previous})"):
        half_switched = _settle_killed_git(target, record, locks) if was in INTERRUPTED else []
        try:
            write_state(target, record.with_state(WriteState.REVERTING))
        except OSError as exc:
            (git.git_dir() / f"{STATE_FILE}.tmp").unlink(missing_ok=True)
            raise FatalError(f"cannot write {git.git_dir()} ({exc.strerror or exc}); nothing was changed") from None
        if half_switched:
            _put_back(target, record)
        elif on_branch:
            _, _, err = git.try_run("checkout", "-q", previous)
            fault_point("checkout: back on the previous branch")
            _check_switched_back(target, record, err)
        if git.rev_parse(f"refs/heads/{branch}") is not None:
            git.run("branch", "-q", "-D", branch)
            fault_point("checkout: series branch deleted")
        drop_record(target, record)
        fault_point("checkout: state file removed")
    action = {
        WriteState.APPLYING: "rolled back the interrupted apply",
        WriteState.REVERTING: "finished the interrupted revert",
    }
    return f"{action.get(was, 'reverted')} on {target.root}: back on {previous}, branch {branch} removed"


def _settle_killed_git(target: Target, record: CheckoutRecord, locks: tuple[GitLock, ...]) -> list[str]:
    """After a kill: remove the git locks the killed run left, and return the series files that a `git checkout`
    killed half-way left between the two branches. Each must hold the series branch's bytes, the previous
    branch's, or be missing (git removes a file before it writes the new one); anything else is an edit made
    since, and nothing is changed."""
    git = target.git
    refuse_others(locks, target.root)
    touched = record.touched or ["python/sglang"]
    dirty = dirty_paths(target, touched)
    if dirty and (edited := _edited(target, record, dirty)):
        raise FatalError(
            f"the interrupted {'apply' if record.state == WriteState.APPLYING else 'revert'} left changes in "
            f"{', '.join(edited[:5])} (HEAD is on {git.current_branch() or 'a detached commit'}); nothing was "
            "changed: check them, then `git checkout -- <files>` and run recover again"
        )
    remove_own(locks, target.root)
    return dirty


def _edited(target: Target, record: CheckoutRecord, dirty: list[str]) -> list[str]:
    """The files of `dirty` that hold neither the series branch's bytes, nor the previous branch's, nor nothing."""
    commits = (record.head, _commit_of(target.git, record.previous))
    allowed = [tree_blobs(target, commit, dirty) for commit in commits]
    now = target.current_blobs(dirty)
    return [path for path in dirty if now[path] and all(now[path] != blobs.get(path) for blobs in allowed)]


def _put_back(target: Target, record: CheckoutRecord) -> None:
    """The previous branch's files, index and HEAD, without `git checkout` (the index and work tree disagree)."""
    still = move_checkout(target, record.previous, record.head, record.touched or ["python/sglang"])
    if still:
        raise FatalError(
            f"could not put {target.root} back on {record.previous} after the interrupted run: {still[0]}; "
            f"fix the cause, then run {hints.recover(target.root)}"
        )
    fault_point("checkout: half-switched files put back")


def _commit_of(git, name: str) -> str:
    return git.rev_parse(f"refs/heads/{name}") or git.rev_parse(name) or name


def _check_switched_back(target: Target, record: CheckoutRecord, err: str) -> None:
    """After `git checkout PREVIOUS`: if git left the series' files (or HEAD) behind, go back onto the branch."""
    git, previous = target.git, record.previous
    is_branch = git.rev_parse(f"refs/heads/{previous}") is not None
    commit = git.rev_parse(f"refs/heads/{previous}" if is_branch else previous) or previous
    touched = record.touched or ["python/sglang"]
    wrong = checkout_mismatch(target, previous if is_branch else None, commit, touched)
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
        f"it is still on {record.branch}"
    )
