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

from sglpatch import hints
from sglpatch.commands.common import add_line_option, add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.output import plural, say
from sglpatch.rebase import rebase_settle
from sglpatch.safety import scratch
from sglpatch.safety.interrupts import fault_point, write_phase
from sglpatch.targets import (
    Foreign,
    Interrupted,
    Pristine,
    RebaseInProgress,
    TargetState,
    commits_past_the_series,
    dirty_paths,
    read_state,
    settle_package,
    settle_rebase_git,
    undo_checkout,
    writing,
)

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
    with writing(target, "recover"):
        scratch.remove_stale()
        state = read_state(target)
        if isinstance(state, Foreign):
            raise FatalError(state.seen)
        if target.is_git:
            _recover_checkout(state)
        else:
            say(settle_package(state, args.force))
    return 0


def _recover_checkout(state: TargetState) -> None:
    target = state.target
    _remove_leftovers(state)
    if isinstance(state, RebaseInProgress):
        rebase = state.rebase
        if state.stopped and rebase.dropping:  # its locks are that run's: the --drop run again removes them
            stopped = rebase.stopped.patch
            number = rebase.patches.index(stopped) + 1 if stopped in rebase.patches else 0
            raise FatalError(
                f"a --drop of {stopped} in {target.root} was cut short, and only it settles what it left; nothing "
                f"was changed: run {hints.drop_rebase(number, target.root)} again"
            )
        if state.stopped:
            raise FatalError(
                f"{rebase.describe_stop()} in {target.root}, waiting for you (not an interruption): "
                f"resolve, then {hints.continue_rebase(target.root)}, or {hints.abort_rebase(target.root)} to put everything back"
            )
        settle_rebase_git(state)
        done = rebase_settle.finish_or_roll_back(target, state.folder, rebase)
        say(f"recovered {target.root}: {done}")
        return
    if isinstance(state, Pristine):
        say(f"nothing to recover: {target.root} has no series applied by sglpatch; it is {AS_IT_WAS}")
        return
    if isinstance(state, Interrupted):
        say(undo_checkout(target, state.record, state.locks))
        say(f"recovered {target.root}: it is {AS_IT_WAS}")
        return
    record = state.record
    if state.in_place:
        unwritten = dirty_paths(target, target.paths_or_package(record.touched))
        if unwritten:
            raise FatalError(
                f"{target.root} is on {record.branch}, but {', '.join(unwritten[:5])} differ from it (a git checkout "
                "that could not write, or an edit since); nothing was changed: commit the edit, or make the files "
                f"writable and {hints.put_back_keeping_copies(target.root, unwritten)}"
            )
        say(f"nothing to recover: {target.root} is {PATCHED} (branch {record.branch})")
    elif state.on_branch:
        past = commits_past_the_series(target, record)
        where = f"{plural(len(past), 'commit')} of your own past" if past else "not at"
        say(
            f"nothing to recover: the series is applied on branch {record.branch}, which {target.root} is on, "
            f"HEAD {where} its last commit"
        )
    else:
        say(f"nothing to recover: the series is applied on branch {record.branch}, which {target.root} is not on")


def _remove_leftovers(state: TargetState) -> None:
    """What a killed run left that holds no state of its own: a half-written state file, a settled rebase's
    folder whose deletion was cut short."""
    for leftover in state.leftovers:
        with write_phase(f"removed {leftover.what}"):
            if leftover.path.is_dir():
                shutil.rmtree(leftover.path)
            else:
                leftover.path.unlink()
            fault_point(f"recover: {leftover.path.name} removed")
        say(f"removed {leftover.path.name}, {leftover.what}")
