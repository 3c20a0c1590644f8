"""`sglpatch revert`: take the series back out, leaving the target as it was."""

from __future__ import annotations

from sglpatch.commands.common import add_line_option, add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.interrupts import guarded, write_phase
from sglpatch.output import say
from sglpatch.targets import journal, target_state
from sglpatch.targets.checkout_undo import undo_checkout
from sglpatch.targets.target import dirty_paths, target_lock
from sglpatch.targets.target_state import Applied, Foreign, Interrupted, Pristine, RebaseInProgress, TargetState
from sglpatch.targets.write_check import package_mismatch, restore_package


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_line_option(parser)  # without --sglang: that line's default base
    parser.add_argument("--force", action="store_true", help="package folders: restore even files edited since apply")


def run(args) -> int:
    target = resolve_target(args)
    with guarded("revert", str(target.root)), target_lock(target):
        state = target_state.read(target)
        if isinstance(state, (Foreign, RebaseInProgress)):
            raise FatalError(state.refusal())
        if target.is_git:
            _revert_checkout(state)
        elif isinstance(state, Pristine) and state.leftovers:
            with write_phase(f"{target.root} is as it was"):
                journal.discard_leftover(target.root)
            say(f"{target.root} was not patched: removed what an interrupted run left in {journal.JOURNAL_DIR}/")
        else:
            record = state.journal if isinstance(state, (Applied, Interrupted)) else None
            with write_phase(f"the series is reverted: {target.root} is as it was"):
                restored = restore_package(target, force=args.force)
            wrong = package_mismatch(target.root, record, "before") if record else []
            if wrong:
                raise FatalError(f"{target.root / wrong[0]} is not as it was after the revert: check it by hand")
            say(f"reverted {target.root}: restored {len(restored)} files byte for byte")
    return 0


def _revert_checkout(state: TargetState) -> None:
    target = state.target
    for leftover in state.blocking_leftovers:  # a run killed while writing the state file; the file is still whole
        leftover.path.unlink()
    if isinstance(state, Pristine):
        raise FatalError(f"{target.root} has no series applied by sglpatch: nothing to revert")
    if isinstance(state, Interrupted):
        say(undo_checkout(target, state.record, state.locks))
        return
    record = state.record
    if not state.on_branch:
        raise FatalError(f"{target.root} is not on {record.branch} (the series branch); switch to it or revert by hand")
    if not state.at_head:
        raise FatalError(f"{record.branch} has commits after the series; revert by hand so they are not lost")
    dirty = dirty_paths(target, target.paths_or_package(record.touched))
    if dirty:
        raise FatalError(
            f"uncommitted changes under the series' files: {', '.join(dirty[:5])}; commit or stash them first"
        )
    say(undo_checkout(target, record))
    if record.before is not None:
        say(
            f"{target.root} still carries the series below it, on branch {record.before.branch}: revert again to take it out"
        )
