"""A package folder's writes as apply, revert and recover ask for them, over its journal (journal.py).

Each checks what it wrote before it says so: a file that is not as the journal says is rolled
back (apply) or named (revert, recover), never reported as done.
"""

from __future__ import annotations

import errno
import shlex

from sglpatch import hints
from sglpatch.errors import FatalError, os_reason
from sglpatch.safety.interrupts import write_phase
from sglpatch.targets import journal
from sglpatch.targets.checkout_apply import applied_outcome
from sglpatch.targets.plan import ALREADY_APPLIED, ApplyPlan
from sglpatch.targets.target import Target
from sglpatch.targets.target_state import Applied, Interrupted, Pristine, TargetState
from sglpatch.targets.write_states import WriteState


def apply_to_package(plan: ApplyPlan, digest: str) -> None:
    """Write the plan's patches into the package folder, all or none, SIGINT/SIGTERM held until it is done."""
    target = plan.target
    with write_phase(applied_outcome(target.root)):
        record = journal.write_changes(target.root, journal.with_bytecode(_changes(plan)), digest, _names(plan))
        wrong = journal.files_not_as(target.root, record, "after")
        if wrong:
            try:
                journal.restore(target.root)
            except FatalError as exc:
                raise FatalError(
                    f"{target.root / wrong[0]} is not what sglpatch wrote, and rolling back failed ({exc}); "
                    f"run {hints.recover(target.root)}"
                ) from None
            raise FatalError(
                f"{target.root / wrong[0]} is not what sglpatch wrote (changed by someone else meanwhile?); "
                f"rolled back, nothing changed: {target.root} is as it was"
            )


def _changes(plan: ApplyPlan) -> list[journal.Change]:
    target = plan.target
    paths = list(dict.fromkeys(p for s in plan.to_apply for p in s.patch.touched_paths))
    before, was_executable = target.read_files(paths), target.executables(paths)
    executable = plan.workspace.executables(paths)
    changes = []
    for path, old in before.items():
        new = plan.workspace.read(path)
        if new != old or (new is not None and (path in executable) != (path in was_executable)):
            changes.append(journal.Change(target.local_path(path), old, new, path in executable))
    return changes


def _names(plan: ApplyPlan) -> list[str]:
    return [s.patch.name for s in plan.states if s.state != ALREADY_APPLIED]


def undo_package(state: TargetState, force: bool) -> str:
    """Revert: every journaled file back as it was (`force`: even one edited since); returns the line saying so."""
    target = state.target
    if isinstance(state, Pristine) and state.leftovers:
        with write_phase(f"{target.root} is as it was"):
            journal.discard_leftover(target.root)
        return f"{target.root} was not patched: removed what an interrupted run left in {journal.JOURNAL_DIR}/"
    record = state.journal if isinstance(state, (Applied, Interrupted)) else None
    with write_phase(f"the series is reverted: {target.root} is as it was"):
        restored = _restore(target, force=force)
    wrong = journal.files_not_as(target.root, record, "before") if record else []
    if wrong:
        raise FatalError(f"{target.root / wrong[0]} is not as it was after the revert: check it by hand")
    return f"reverted {target.root}: restored {len(restored)} files byte for byte"


def settle_package(state: TargetState, force: bool) -> str:
    """Recover: an interrupted apply rolled back or revert finished, or what a killed run left removed; returns
    the line that says which state the folder is in (as it was, or fully patched)."""
    root = state.target.root
    if isinstance(state, Pristine) and state.leftovers:
        with write_phase(f"{root} is as it was"):
            journal.discard_leftover(root)
        return f"recovered {root}: removed what an interrupted run left in {journal.JOURNAL_DIR}/; it is as it was"
    if isinstance(state, Pristine):
        return f"nothing to recover: {root} has no sglpatch journal; it is as it was"
    if isinstance(state, Interrupted):
        applying = state.journal.state == WriteState.APPLYING
        done = "rolled back the interrupted apply" if applying else "finished the revert"
        with write_phase(f"{done}: {root} is as it was"):
            restored = _restore(state.target, force=force)
        return f"recovered {root}: {done} ({len(restored)} files restored byte for byte); it is as it was"
    record = state.journal
    with write_phase(f"{root} is fully patched"):
        removed = journal.remove_stray(root, record)
    edited = journal.changed_files(root, record, expect="after")
    if edited:
        raise FatalError(
            f"{root} is patched, but {', '.join(edited[:5])} changed since sglpatch wrote them; nothing was changed: "
            f"{_kept(root, edited)}`sglpatch revert --force --sglang "
            f"{shlex.quote(str(root))}` puts back the original bytes (throwing the edits there away)"
        )
    note = f"removed {removed} temporary files a killed run left; " if removed else "nothing to recover: "
    return f"{note}{root} is fully patched"


def _kept(root, paths: list[str]) -> str:
    keep = hints.keep_copies(root, paths)
    return f"{keep} keeps your edits beside them, then " if keep else ""


def journal_progress(state: Interrupted) -> str:
    """Where a package folder's interrupted write stands: how many journaled files are as they were."""
    files = state.journal.files
    not_back = journal.changed_files(state.target.root, state.journal, expect="before")
    return (
        f"{state.operation} interrupted: {len(files) - len(not_back)} of {len(files)} files as they were "
        f"before the apply, {len(not_back)} not ({', '.join(not_back[:3])})"
        if not_back
        else f"{state.operation} interrupted: all {len(files)} files are as they were before the apply"
    )


def _restore(target: Target, force: bool) -> list[str]:
    """journal.restore, with a file that cannot be written made a one-line refusal that says where things stand
    (checked file by file: "fully patched" or "as it was" only when every file is)."""
    try:
        return journal.restore(target.root, force=force)
    except OSError as exc:
        why = f"cannot write {exc.filename or target.root} ({os_reason(exc)})"
        record = journal.read_journal(target.root)
        if record is None:
            raise FatalError(
                f"{why}; the journal is gone but {journal.JOURNAL_DIR}/ is left: run {hints.recover(target.root)}"
            ) from None
        if record.state == WriteState.APPLIED and not journal.files_not_as(target.root, record, "after"):
            where = f"nothing was changed: {target.root} is still fully patched"
        elif not journal.files_not_as(target.root, record, "before"):
            where = f"every file is back, but the journal is left: run {hints.recover(target.root)}"
        elif exc.errno == errno.ENAMETOOLONG:
            where = (
                "the revert stopped part-way; move the package folder to a shorter path, "
                "then run `sglpatch recover --sglang NEW-PATH`"
            )
        else:
            left = journal.files_not_as(target.root, record, "before")
            where = (
                f"stopped part-way, {len(left)} of {len(record.files)} files not yet back ({', '.join(left[:3])}); "
                f"free space or make it writable, then run {hints.recover(target.root)}"
            )
        raise FatalError(f"{why}; {where}") from None
