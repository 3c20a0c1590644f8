"""`sglpatch apply`: the whole series onto a target, or nothing at all."""

from __future__ import annotations

import time

from sglpatch import hints
from sglpatch.commands.common import add_series_options, add_target_option, open_with_line
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import KEEP_SPARSE_AS_IT_IS, GitFailed, git_reason
from sglpatch.interrupts import fault_point, guarded, write_phase
from sglpatch.output import say
from sglpatch.pin import Pin
from sglpatch.series import Series
from sglpatch.targets import journal, target_state
from sglpatch.targets.checkout_record import CheckoutRecord, drop_record, replace_state, write_state
from sglpatch.targets.checkout_undo import undo_checkout
from sglpatch.targets.ownership import record_stats, refuse_other_owners
from sglpatch.targets.plan import ALREADY_APPLIED, ApplyPlan, make_plan
from sglpatch.targets.space import free_reserve, make_reserve, room_to_roll_back
from sglpatch.targets.target import Target, branch_refusal, dirty_paths, target_lock
from sglpatch.targets.target_state import Applied, TargetState
from sglpatch.targets.user_work import work_of_the_user
from sglpatch.targets.worktree_bytes import give_back_stats, give_back_worktree, record_worktree
from sglpatch.targets.write_check import checkout_mismatch, package_mismatch, restore_previous
from sglpatch.targets.write_states import WriteState


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
        say(f"line {line.name} ({len(series.patches)} patches, pinned at {pin.describe()})")
    if args.three_way and not target.is_git:
        raise FatalError("--3way needs a git checkout; a package folder must be at the pin")
    with guarded("apply", str(target.root)), target_lock(target):
        state = target_state.read(target)
        target_state.refuse_unless_settled(state)
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
            done = f"the series is applied: {target.root} is fully patched"
            if target.is_git:
                branch = args.branch or f"sglpatch/{pin.tag}"
                if why := branch_refusal(target, branch, hints.option("--branch NAME", "BRANCH=NAME")):
                    raise FatalError(why)
                below = _stack_below(state)
                with write_phase(done):
                    _apply_to_checkout(plan, branch, below, series.digest(), three_way=args.three_way)
                where = f"branch {branch}" + (f", stacked on {below.branch}" if below else "")
            else:
                with write_phase(done):
                    _apply_to_package(plan, series.digest())
                where = f"package folder (journal in .sglpatch/; {hints.revert(target.root)} puts it back)"
    applied = [s.patch.name for s in plan.to_apply]
    skipped = len(plan.states) - len(applied)
    note = f", {skipped} already there" if skipped else ""
    say(f"applied {len(applied)} patches to {target.root} on {where}{note} in {time.monotonic() - started:.1f} s")
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
        state = target_state.read(target)
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


def _apply_to_checkout(plan: ApplyPlan, branch: str, below: CheckoutRecord | None, digest: str, three_way: bool) -> str:
    git = plan.target.git
    head = git.run("rev-parse", "HEAD")
    previous = git.current_branch() or head
    committer = git.committer()
    parent = head
    for state in plan.to_apply:
        parent = plan.workspace.commit(state.patch, state.tree, parent, committer)
    touched = sorted({p for s in plan.states for p in s.patch.touched_paths})
    try:
        worktree = record_worktree(plan.target, touched)
        stats, git_stats = record_stats(plan.target, touched)
    except (GitFailed, OSError) as exc:
        raise FatalError(
            f"{_failure(exc, git.git_dir())}; nothing was changed: {plan.target.root} is as it was"
        ) from None
    refuse_other_owners(plan.target, stats, git_stats)
    record = CheckoutRecord(
        state=WriteState.APPLYING,
        branch=branch,
        previous=previous,
        head=parent,
        patches=[s.patch.name for s in plan.states],
        touched=touched,
        before=below,
        series=digest,
        base=head,
        three_way=three_way,
        worktree=worktree,
        stats=stats,
        git_stats=git_stats,
    )
    room = room_to_roll_back(plan.target, record.touched)
    try:
        make_reserve(plan.target, room)
    except FatalError as exc:
        raise FatalError(f"{exc}; nothing was changed: {plan.target.root} is as it was") from None
    try:
        replace_state(plan.target, record)
    except OSError as exc:
        free_reserve(plan.target)
        raise FatalError(
            f"cannot write {git.git_dir()} ({os_reason(exc)}); nothing was changed: {plan.target.root} is as it was"
        ) from None
    status, err = 0, ""
    try:
        plan.workspace.copy_commit_to(parent, git, f"refs/heads/{branch}", force=False)
        fault_point("checkout: branch fetched")
        status, _, err = git.try_run(*KEEP_SPARSE_AS_IT_IS, "checkout", "-q", branch)
        fault_point("checkout: switched to the branch")
        if status != 0 and git.current_branch() != branch:
            raise _SwitchFailed(f"could not make and switch to {branch} ({git_reason(err)})")
        wrong = checkout_mismatch(plan.target, branch, parent, record.touched)
        if wrong:
            why = next((line for line in err.splitlines() if line.startswith(("error:", "fatal:"))), "")
            cause = f"{wrong[0]}{f' (git: {why})' if why else ''}"
            raise _SwitchFailed(f"git switched {plan.target.root} to {branch} but left it unwritten: {cause}")
        give_back_stats(plan.target, record)
        free_reserve(plan.target)
        write_state(plan.target, record.with_state(WriteState.APPLIED))
    except (_SwitchFailed, GitFailed, OSError) as exc:
        _roll_back_checkout(plan, record, _failure(exc, git.git_dir()))
    if status != 0:  # git switched, then its post-checkout hook failed: git says the hook cannot undo a switch
        say(f"note: git's post-checkout hook exited {status} after the switch to {branch} ({git_reason(err)})")
    return branch


class _SwitchFailed(Exception):
    """The switch to the series branch did not happen, or not wholly: the message says how."""


def _failure(exc: Exception, git_dir) -> str:
    if isinstance(exc, OSError):
        return f"cannot write {exc.filename or git_dir} ({os_reason(exc)})"
    return str(exc)


def _roll_back_checkout(plan: ApplyPlan, record: CheckoutRecord, cause: str) -> None:
    """The switch failed part-way (a full disk, a read-only work tree): put HEAD, the index and the series'
    files back as they were, then delete the branch and the record; verified before it says so."""
    target, git, root = plan.target, plan.target.git, plan.target.root
    try:
        free_reserve(target)
        still = restore_previous(target, record)
        if not still:
            give_back_worktree(target, record.worktree)
            if git.rev_parse(f"refs/heads/{record.branch}") is not None:
                git.run("branch", "-q", "-D", record.branch)
            give_back_stats(target, record)
            drop_record(target, record)
    except (GitFailed, OSError) as exc:
        still = [_failure(exc, git.git_dir())]
    if still:
        raise FatalError(
            f"{cause}; rolling back failed too ({still[0]}): the record says the apply was interrupted; "
            f"free space or fix the cause, then run {hints.recover(root)}"
        )
    raise FatalError(f"{cause}; rolled back, nothing changed: {root} is as it was")


def _apply_to_package(plan: ApplyPlan, digest: str) -> None:
    target = plan.target
    paths = list(dict.fromkeys(p for s in plan.to_apply for p in s.patch.touched_paths))
    before, was_executable = target.read_files(paths), target.executables(paths)
    executable = plan.workspace.executables(paths)
    changes = []
    for path, old in before.items():
        new = plan.workspace.read(path)
        if new != old or (new is not None and (path in executable) != (path in was_executable)):
            changes.append(journal.Change(target.local_path(path), old, new, path in executable))
    names = [s.patch.name for s in plan.states if s.state != ALREADY_APPLIED]
    record = journal.write_changes(target.root, journal.with_bytecode(changes), digest, names)
    wrong = package_mismatch(target.root, record, "after")
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
