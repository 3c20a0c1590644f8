"""`sglpatch status`: per patch, applied / applies cleanly / conflicts, and the pin."""

from __future__ import annotations

from sglpatch import hints
from sglpatch.commands.common import add_series_options, add_target_option, open_with_line
from sglpatch.output import plural, say
from sglpatch.pin import Pin, drifted_files
from sglpatch.series import Series
from sglpatch.targets import (
    Applied,
    Interrupted,
    TargetState,
    branch_refusal,
    busy,
    dirty_paths,
    journal_progress,
    make_plan,
    read_state,
    tree_blobs,
    working_run,
)


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_series_options(parser)


def run(args) -> int:
    target, line, series, pin = open_with_line(args)
    working = working_run(target)
    state = read_state(target)
    say(f"target: {target.describe()}")
    say(f"line:   {line.name} ({line.directory})" if line else f"series: {series.directory}")
    if working:
        say(f"NOTE:   an sglpatch run (pid {working}) is working on it now: what follows is how it stands meanwhile")
    elif note := state.note():
        say(f"NOTE:   {note}")
    with make_plan(target, series, pin) as plan:
        recorded = _applied_three_way(state, series) and not plan.all_applied
        if recorded or (isinstance(state, Applied) and state.record and (state.record.before or not state.in_place)):
            say(f"state:  {state.describe()}")
        if isinstance(state, Interrupted) and state.journal is not None:
            say(f"state:  {journal_progress(state)}")
        if recorded:
            _say_recorded(state, series, pin)
            say(f"apply:  {NOTHING_TO_DO}")
            return 0
        if plan.drift:
            say(f"pin:    differs from {pin.describe()} in {plural(len(plan.drift), 'file')}: {', '.join(plan.drift)}")
        else:
            say(f"pin:    at {pin.describe()} ({len(pin.blobs)} files match)")
        if plan.dirty:
            say(f"dirty:  {', '.join(plan.dirty)}")
        width = max(len(s.patch.name) for s in plan.states)
        for patch_state in plan.states:
            say(f"  {patch_state.patch.name:<{width}}  {patch_state.describe()}")
        say(f"apply:  {_what_apply_does(target, working, state, plan, pin)}")
    return 0


NOTHING_TO_DO = "nothing to do: the series is in"


def _what_apply_does(target, working: str | None, state: TargetState, plan, pin: Pin) -> str:
    """What `apply` would do now, decided as apply decides: its lock, the target's state, then the plan."""
    if working:
        return f"refuses: {busy(target, working)}"
    if why := state.refusal():
        return f"refuses: {why}"
    if plan.all_applied:
        return NOTHING_TO_DO
    if why := plan.refusal(pin.describe(), three_way=False):
        return f"refuses: {why}"
    if target.is_git and (
        why := branch_refusal(target, f"sglpatch/{pin.tag}", hints.option("--branch NAME", "BRANCH=NAME"))
    ):
        return f"refuses: {why}"
    return f"applies {plural(len(plan.to_apply), 'patch')}"


def _applied_three_way(state: TargetState, series: Series) -> bool:
    """A 3-way apply onto a base that differs from the pin cannot be replayed backwards: its record tells."""
    return (
        isinstance(state, Applied)
        and state.record is not None
        and state.record.three_way
        and state.in_place
        and state.record.series == series.digest()
    )


def _say_recorded(state: Applied, series: Series, pin: Pin) -> None:
    """What the record of a 3-way apply says: the patches cannot be taken back out one by one to check."""
    record = state.record
    drift = drifted_files(pin, tree_blobs(state.target, record.base, list(pin.blobs)))
    say(
        f"pin:    the series was merged 3-way onto {record.base[:12]}, whose base differs from {pin.describe()}"
        + (f" in {plural(len(drift), 'file')}: {', '.join(drift)}" if drift else " around the patches' lines")
    )
    dirty = dirty_paths(state.target, state.target.paths_or_package(record.touched))
    if dirty:
        say(f"dirty:  {', '.join(dirty)}")
    width = max(len(p.name) for p in series.patches)
    for patch in series.patches:
        say(f"  {patch.name:<{width}}  applied (3-way)")
