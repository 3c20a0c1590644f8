"""`sglpatch recover`: after a run was cut short (killed, power loss), finish or undo it.

An interrupted apply is rolled back (the target is as it was); an interrupted
revert is finished (also as it was); an interrupted rebase is rolled back, or
finished if it had staged its result (then fully patched on the rebased
branch); scratch a killed run left is removed. A target that was not
interrupted is left alone. The last line says which state the target is in:
as it was, or fully patched.
"""

from __future__ import annotations

import shutil

from sglpatch import hints, journal, rebase_settle, rebase_store
from sglpatch.checkout_record import STATE_FILE, read_state
from sglpatch.checkout_undo import undo_checkout
from sglpatch.commands.common import add_line_option, add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.interrupts import fault_point, guarded, write_phase
from sglpatch.output import say
from sglpatch.plan import dirty_paths
from sglpatch.target import Target, target_lock
from sglpatch.write_check import restore_package
from sglpatch.write_states import INTERRUPTED, WriteState

AS_IT_WAS = "as it was"
PATCHED = "fully patched"


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_line_option(parser)  # without --sglang: that line's default base
    parser.add_argument(
        "--force", action="store_true", help="package folders: roll back even files edited after the interruption"
    )


def run(args) -> int:
    target = resolve_target(args)
    with guarded("recover", str(target.root)), target_lock(target):
        if target.is_git:
            _recover_checkout(target)
        else:
            _recover_package(target, args.force)
    return 0


def _recover_checkout(target: Target) -> None:
    git = target.git
    leftover = git.git_dir() / rebase_store.DELETING
    if leftover.exists():
        with write_phase():
            shutil.rmtree(leftover)
        say(f"removed {leftover.name}, the state of a settled rebase whose deletion was cut short")
    folder = rebase_store.state_dir(git)
    rebase = rebase_store.load(folder)
    if rebase is not None:
        if rebase.stopped:
            raise FatalError(
                f"{rebase.describe_stop()} in {target.root}, waiting for you (not an interruption): "
                f"resolve, then {hints.CONTINUE_REBASE}, or {hints.ABORT_REBASE} to put everything back"
            )
        _refuse_unexplained_changes(target, rebase)
        done = rebase_settle.finish_or_roll_back(target, folder, rebase)
        say(f"recovered {target.root}: {done}")
        return
    tmp = git.git_dir() / f"{STATE_FILE}.tmp"
    if tmp.exists():
        with write_phase("removed a half-written state file"):
            tmp.unlink()
            fault_point("recover: state file scratch removed")
        say(f"removed a half-written {tmp.name} (a run was killed while writing it)")
    record = read_state(target)
    if record is None:
        say(f"nothing to recover: {target.root} has no series applied by sglpatch; it is {AS_IT_WAS}")
        return
    if record.state in INTERRUPTED:
        say(undo_checkout(target, record))
        say(f"recovered {target.root}: it is {AS_IT_WAS}")
        return
    branch = record.branch
    if git.current_branch() == branch and git.run("rev-parse", "HEAD") == record.head:
        unwritten = dirty_paths(target, record.touched or ["python/sglang"])
        if unwritten:
            raise FatalError(
                f"{target.root} is on {branch}, but {', '.join(unwritten[:5])} differ from it (a git checkout that "
                "could not write, or an edit since); nothing was changed: make the files writable and "
                "`git checkout -- <files>`, or commit the edit"
            )
        say(f"nothing to recover: {target.root} is {PATCHED} (branch {branch})")
    else:
        say(f"nothing to recover: the series is applied on branch {branch}, which {target.root} is not on")


def _refuse_unexplained_changes(target: Target, rebase: rebase_store.RebaseState) -> None:
    """Rolling a rebase back discards work-tree changes: only when its own steps explain them.

    Between its steps a rebase leaves the work tree clean, and a kill inside `git cherry-pick` leaves
    CHERRY_PICK_HEAD; anything else (a kill inside `git checkout`, or an edit since) is not guessed at."""
    git = target.git
    if rebase.phase == rebase_store.INSTALLING or (git.git_dir() / "CHERRY_PICK_HEAD").exists():
        return
    changed = git.run("diff", "--name-only", "HEAD").splitlines()
    if changed:
        raise FatalError(
            f"the interrupted rebase left changes in {', '.join(changed[:5])} (HEAD is detached); nothing was "
            "changed: check them, then `git checkout -- <files>` and run recover again"
        )


def _recover_package(target: Target, force: bool) -> None:
    root = target.root
    if journal.has_leftover(root):
        with write_phase(f"{root} is {AS_IT_WAS}"):
            journal.discard_leftover(root)
        say(f"recovered {root}: removed what an interrupted run left in {journal.JOURNAL_DIR}/; it is {AS_IT_WAS}")
        return
    record = journal.read_journal(root)
    if record is None:
        say(f"nothing to recover: {root} has no sglpatch journal; it is {AS_IT_WAS}")
        return
    if record.state in INTERRUPTED:
        done = "rolled back the interrupted apply" if record.state == WriteState.APPLYING else "finished the revert"
        with write_phase(f"{done}: {root} is {AS_IT_WAS}"):
            restored = restore_package(target, force=force)
        say(f"recovered {root}: {done} ({len(restored)} files restored byte for byte); it is {AS_IT_WAS}")
        return
    with write_phase(f"{root} is {PATCHED}"):
        removed = journal.remove_stray(root, record)
    edited = journal.changed_files(root, record, expect="after")
    if edited:
        raise FatalError(
            f"{root} is patched, but {', '.join(edited[:5])} changed since sglpatch wrote them; "
            "`sglpatch revert --force` puts back the original bytes"
        )
    note = f"removed {removed} temporary files a killed run left; " if removed else "nothing to recover: "
    say(f"{note}{root} is {PATCHED}")
