"""Take a series branch back out of a checkout: after a revert, or to settle an interrupted apply or revert."""

from __future__ import annotations

from sglpatch.checkout_record import STATE_FILE, CheckoutRecord, write_state
from sglpatch.errors import FatalError
from sglpatch.interrupts import fault_point, write_phase
from sglpatch.plan import dirty_paths
from sglpatch.target import Target
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
            write_state(target, record.with_state(WriteState.REVERTING))
        if on_branch:
            git.run("checkout", "-q", previous)
            fault_point("checkout: back on the previous branch")
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
