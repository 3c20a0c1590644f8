"""Put a series branch into a checkout, all or nothing: the write transaction of `apply` (undo_checkout takes it out).

The branch's commits are made in the plan's workspace first. Then, before the first write to the
checkout: the bytes, modes and owners of every file the series touches are recorded, room to roll
back is set aside (space.py), and the record says "applying" with this run's name. The branch is
fetched and switched to, every touched file checked against it (write_check.py), and the record
says "applied". A failure on the way rolls back to the branch, index and bytes as they were, or, if
that fails too, leaves the record saying "applying" for `recover`.
"""

from __future__ import annotations

from sglpatch import hints
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import KEEP_SPARSE_AS_IT_IS, GitFailed, git_reason
from sglpatch.output import say
from sglpatch.safety.interrupts import fault_point, write_phase
from sglpatch.targets.checkout_record import CheckoutRecord, drop_record, replace_state, write_state
from sglpatch.targets.ownership import record_stats, refuse_other_owners
from sglpatch.targets.plan import ApplyPlan
from sglpatch.targets.space import free_reserve, make_reserve, room_to_roll_back
from sglpatch.targets.worktree_bytes import back_as_it_was, give_back_stats, record_worktree
from sglpatch.targets.write_check import checkout_mismatch, restore_previous
from sglpatch.targets.write_states import WriteState


def apply_to_checkout(plan: ApplyPlan, branch: str, below: CheckoutRecord | None, digest: str, three_way: bool) -> str:
    """Make `branch` (the plan's patches on HEAD; `below`: the record of a series it goes on top of) and switch
    the checkout to it, SIGINT/SIGTERM held until it is done."""
    with write_phase(applied_outcome(plan.target.root)):
        return _apply(plan, branch, below, digest, three_way)


def applied_outcome(root) -> str:
    """What an apply that went through says, to a signal held back meanwhile too."""
    return f"the series is applied: {root} is fully patched"


def _apply(plan: ApplyPlan, branch: str, below: CheckoutRecord | None, digest: str, three_way: bool) -> str:
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
        _roll_back(plan, record, _failure(exc, git.git_dir()))
    if status != 0:  # git switched, then its post-checkout hook failed: git says the hook cannot undo a switch
        say(f"note: git's post-checkout hook exited {status} after the switch to {branch} ({git_reason(err)})")
    return branch


class _SwitchFailed(Exception):
    """The switch to the series branch did not happen, or not wholly: the message says how."""


def _failure(exc: Exception, git_dir) -> str:
    if isinstance(exc, OSError):
        return f"cannot write {exc.filename or git_dir} ({os_reason(exc)})"
    return str(exc)


def _roll_back(plan: ApplyPlan, record: CheckoutRecord, cause: str) -> None:
    """The switch failed part-way (a full disk, a read-only work tree): put HEAD, the index and the series'
    files back as they were, then delete the branch and the record; verified before it says so, by the bytes
    the files held (git writes them through the user's filters and eol settings)."""
    target, git, root = plan.target, plan.target.git, plan.target.root
    try:
        free_reserve(target)
        restore_previous(target, record)
        still = back_as_it_was(target, record)
        if not still:
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
