"""`sglpatch apply`: the whole series onto a target, or nothing at all."""

from __future__ import annotations

import time

from sglpatch import hints
from sglpatch.commands.common import add_series_options, add_target_option, open_with_line
from sglpatch.errors import FatalError
from sglpatch.git import GitFailed
from sglpatch.output import plural, say
from sglpatch.pin import Pin
from sglpatch.safety.interrupts import write_phase
from sglpatch.series import Series
from sglpatch.targets import (
    Applied,
    ApplyPlan,
    CheckoutRecord,
    Target,
    TargetState,
    apply_to_checkout,
    apply_to_package,
    branch_refusal,
    dirty_paths,
    make_plan,
    read_state,
    refuse_unless_settled,
    undo_checkout,
    work_of_the_user,
    writing,
)


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_series_options(parser)
    parser.add_argument(
        "--3way",
        dest="three_way",
        action="store_true",
        help="git targets: fall back to a 3-way apply where the base differs from the pin",
    )
    parser.add_argument("--branch", help="git targets: branch for the series (default sglpatch/<pin tag>)")


def run(args) -> int:
    started = time.monotonic()
    target, line, series, pin = open_with_line(args, build_base=True)
    if line is not None:
        say(f"line {line.name} ({plural(len(series.patches), 'patch')}, pinned at {pin.describe()})")
    if args.three_way and not target.is_git:
        raise FatalError("--3way needs a git checkout; a package folder must be at the pin")
    with writing(target, "apply"):
        state = read_state(target)
        refuse_unless_settled(state)
        if _recorded_as_applied(state, series):
            say(f"already applied: all {len(series.patches)} patches are in {target.describe()} ({state.describe()})")
            return 0
        plan, state = _plan(target, state, series, pin, args)
        with plan:
            if plan.all_applied:
                say(f"already applied: all {len(plan.states)} patches are in {target.describe()}")
                return 0
            if isinstance(state, Applied) and state.journal is not None:
                raise FatalError(
                    f"{target.root} carries an earlier apply of another series; run {hints.revert(target.root)} first"
                )
            _refuse_unless_ready(plan, pin.describe(), args.three_way)
            if target.is_git:
                branch = args.branch or f"sglpatch/{pin.tag}"
                if why := branch_refusal(target, branch, hints.option("--branch NAME", "BRANCH=NAME")):
                    raise FatalError(why)
                below = _stack_below(state)
                apply_to_checkout(plan, branch, below, series.digest(), three_way=args.three_way)
                where = f"branch {branch}" + (f", stacked on {below.branch}" if below else "")
            else:
                apply_to_package(plan, series.digest())
                where = f"package folder (journal in .sglpatch/; {hints.revert(target.root)} puts it back)"
    applied = [s.patch.name for s in plan.to_apply]
    skipped = len(plan.states) - len(applied)
    note = f", {skipped} already there" if skipped else ""
    say(
        f"applied {plural(len(applied), 'patch')} to {target.root} on {where}{note} in {time.monotonic() - started:.1f} s"
    )
    return 0


def _refuse_unless_ready(plan: ApplyPlan, release: str, three_way: bool) -> None:
    if why := plan.refusal(release, three_way):
        raise FatalError(why)


def _recorded_as_applied(state: TargetState, series: Series) -> bool:
    """A 3-way apply cannot be replayed backwards to find it: its record says this series is applied here."""
    if not (isinstance(state, Applied) and state.record and state.record.three_way and state.in_place):
        return False
    record = state.record
    return record.series == series.digest() and not dirty_paths(
        state.target, state.target.paths_or_package(record.touched)
    )


def _stack_below(state: TargetState) -> CheckoutRecord | None:
    """The record of a series already applied here, which the new one goes on top of (revert peels one at a time)."""
    if not (isinstance(state, Applied) and state.record):
        return None
    record = state.record
    if not state.on_branch:
        raise FatalError(
            f"{state.target.root} carries a series on branch {record.branch}, and HEAD is not on it: switch to "
            f"{record.branch} to apply another series on top, or run {hints.revert(state.target.root)} after switching"
        )
    return record


def _plan(target: Target, state: TargetState, series: Series, pin: Pin, args) -> tuple[ApplyPlan, TargetState]:
    """The apply plan, and the state it starts from: on the default base a series applied before patches/
    changed is taken out first."""
    try:
        plan = make_plan(target, series, pin, three_way=args.three_way)
    except GitFailed as exc:  # the plan is tried in a scratch workspace: the target is untouched
        raise FatalError(f"{exc}; nothing was changed: {target.root} is as it was") from None
    if plan.all_applied or args.sglang is not None or not isinstance(state, Applied) or state.record is None:
        return plan, state
    plan.close()
    while isinstance(state, Applied) and state.record is not None:
        _take_out_an_earlier_series(state)
        state = read_state(target)
    return make_plan(target, series, pin, three_way=args.three_way), state


def _take_out_an_earlier_series(state: Applied) -> None:
    """build/sglang is the tool's own: revert the series recorded there, unless it has changes of its own."""
    target, record = state.target, state.record
    edited = dirty_paths(target, target.paths_or_package(record.touched))
    if not state.in_place or edited:
        yours = "; ".join(work_of_the_user(target, record)) or "HEAD moved from where the apply left it"
        raise FatalError(
            f"{target.root} carries an earlier version of the series and work of your own ({yours}); nothing was "
            f"changed: to keep that work, move the folder out of build/ ({hints.move_aside(target.root)}), "
            f"then {hints.apply()} builds a fresh one"
        )
    say(f"{target.root} carries an earlier version of the series: taking it out first")
    with write_phase(f"the earlier series is out: {target.root} is at the pin"):
        say(undo_checkout(target, record))
