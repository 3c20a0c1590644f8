"""Take a series branch back out of a checkout: after a revert, or to settle an interrupted apply or revert."""

from __future__ import annotations

from sglpatch import hints
from sglpatch.checkout_record import STATE_FILE, CheckoutRecord, write_state
from sglpatch.errors import FatalError
from sglpatch.interrupts import fault_point, write_phase
from sglpatch.plan import dirty_paths
from sglpatch.target import Target
from sglpatch.write_check import checkout_mismatch, move_checkout
from sglpatch.write_states import INTERRUPTED, WriteState


def undo_checkout(target: Target, record: CheckoutRecord) -> str:
    """Back to the branch the series was applied from, the series branch gone; returns the line saying so."""
    git = target.git
    branch, previous = record.branch, record.previous
    was = record.state
    on_branch = git.current_branch() == branch
    if was in INTERRUPTED:
        # Our own steps leave these files clean; a git checkout killed half-way (or an edit since) does not.
        dirty = dirty_paths(target, record.touched or ["python/sglang"])
        if dirty:
            raise FatalError(
                f"the interrupted {'apply' if was == WriteState.APPLYING else 'revert'} left changes in "
                f"{', '.join(dirty[:5])} (HEAD is on {git.current_branch() or 'a detached commit'}); nothing was "
                "changed: check them, then `git checkout -- <files>` and run recover again"
            )
    with write_phase(f"the series is reverted: {target.root} is as it was (on {previous})"):
        if was != WriteState.REVERTING:
            try:
                write_state(target, record.with_state(WriteState.REVERTING))
            except OSError as exc:
                (git.git_dir() / f"{STATE_FILE}.tmp").unlink(missing_ok=True)
                raise FatalError(f"cannot write {git.git_dir()} ({exc.strerror or exc}); nothing was changed") from None
        if on_branch:
            _, _, err = git.try_run("checkout", "-q", previous)
            fault_point("checkout: back on the previous branch")
            _check_switched_back(target, record, err)
        if git.rev_parse(f"refs/heads/{branch}") is not None:
            git.run("branch", "-q", "-D", branch)
            fault_point("checkout: series branch deleted")
        if record.before:  # a rebase's branch: back to the series it was rebased from
            write_state(target, record.before)
        else:
            (git.git_dir() / STATE_FILE).unlink()
        fault_point("checkout: state file removed")
    action = {
        WriteState.APPLYING: "rolled back the interrupted apply",
        WriteState.REVERTING: "finished the interrupted revert",
    }
    return f"{action.get(was, 'reverted')} on {target.root}: back on {previous}, branch {branch} removed"


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
