"""`sglpatch revert`: take the series back out, leaving the target as it was."""

from __future__ import annotations

from sglpatch.commands.common import add_line_option, add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.output import say
from sglpatch.targets import (
    Foreign,
    Interrupted,
    Pristine,
    RebaseInProgress,
    TargetState,
    dirty_paths,
    read_state,
    undo_checkout,
    undo_package,
    writing,
)


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_line_option(parser)  # without --sglang: that line's default base
    parser.add_argument("--force", action="store_true", help="package folders: restore even files edited since apply")


def run(args) -> int:
    target = resolve_target(args)
    with writing(target, "revert"):
        state = read_state(target)
        if isinstance(state, (Foreign, RebaseInProgress)):
            raise FatalError(state.refusal())
        if target.is_git:
            _revert_checkout(state)
        else:
            say(undo_package(state, force=args.force))
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
