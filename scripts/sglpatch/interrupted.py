"""Did an earlier sglpatch run on a target stop half-way? Apply, revert, status and recover all ask."""

from __future__ import annotations

from sglpatch import hints, journal, rebase_store
from sglpatch.checkout_record import STATE_FILE, read_state
from sglpatch.errors import FatalError
from sglpatch.target import Target
from sglpatch.write_states import WriteState


def interrupted_state(target: Target) -> str | None:
    """What an interrupted sglpatch run left in the target ("apply", "revert", "rebase", "start"), or None."""
    if target.is_git:
        git_dir = target.git.git_dir()
        rebase = rebase_store.load(rebase_store.state_dir(target.git))
        if rebase is not None and not rebase.stopped:
            return "rebase"
        if (git_dir / f"{STATE_FILE}.tmp").exists():
            return "start"
        record = read_state(target)
        state = record.state if record else None
        return {WriteState.APPLYING: "apply", WriteState.REVERTING: "revert"}.get(state)
    if journal.has_leftover(target.root):
        return "start"
    record = journal.read_journal(target.root)
    if record is None:
        return None
    if record.state == WriteState.APPLIED:
        return "start" if journal.stray_files(target.root, record) else None
    return {WriteState.APPLYING: "apply", WriteState.REVERTING: "revert"}[record.state]


def refuse_interrupted(target: Target) -> None:
    """Refuse a target an earlier run left half-way, or one where a rebase waits for the user."""
    if target.is_git:
        rebase_store.refuse_in_progress(target)
    what = interrupted_state(target)
    if what:
        run = "an sglpatch run" if what == "start" else f"an sglpatch {what}"
        raise FatalError(
            f"{run} on {target.root} was interrupted; run {hints.recover(target.root)} to finish or undo it"
        )
