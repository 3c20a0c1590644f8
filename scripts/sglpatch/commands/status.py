"""`sglpatch status`: per patch, applied / applies cleanly / conflicts, and the pin."""

from __future__ import annotations

from sglpatch import hints, rebase_store
from sglpatch.commands.common import add_series_options, add_target_option, open_with_line
from sglpatch.interrupted import interrupted_state
from sglpatch.output import plural, say
from sglpatch.plan import CONFLICTS, make_plan


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_series_options(parser)


def run(args) -> int:
    target, line, series, pin = open_with_line(args)
    with make_plan(target, series, pin) as plan:
        say(f"target: {target.describe()}")
        say(f"line:   {line.name} ({line.directory})" if line else f"series: {series.directory}")
        if interrupted := interrupted_state(target):
            say(f"NOTE:   an sglpatch {interrupted} was cut short here; {hints.recover_short(target.root)} settles it")
        elif target.is_git and (rebase := rebase_store.load(rebase_store.state_dir(target.git))) and rebase.stopped:
            say(f"NOTE:   {rebase.describe_stop()}; {hints.CONTINUE_REBASE} or {hints.ABORT_REBASE}")
        if plan.drift:
            say(
                f"pin:    differs from sglang {pin.release} in {plural(len(plan.drift), 'file')}: {', '.join(plan.drift)}"
            )
        else:
            say(f"pin:    at sglang {pin.release} ({len(pin.blobs)} files match)")
        if plan.dirty:
            say(f"dirty:  {', '.join(plan.dirty)}")
        width = max(len(s.patch.name) for s in plan.states)
        for state in plan.states:
            label = {CONFLICTS: "conflicts"}.get(state.state, state.state)
            detail = f"  ({state.failure.describe().split(': ', 1)[-1]})" if state.failure else ""
            say(f"  {state.patch.name:<{width}}  {label}{detail}")
    return 0
