"""`sglpatch revert`: take the series back out, leaving the target as it was."""

from __future__ import annotations

from sglpatch import journal, rebase_state
from sglpatch.checkout_record import APPLYING, REVERTING, STATE_FILE, read_state, write_state
from sglpatch.commands.common import add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.interrupts import fault_point, guarded, write_phase
from sglpatch.output import say
from sglpatch.plan import dirty_paths
from sglpatch.settle import checkout_mismatch, move_checkout, package_mismatch
from sglpatch.target import Target, target_lock


def add_arguments(parser) -> None:
    add_target_option(parser)
    parser.add_argument("--force", action="store_true", help="package folders: restore even files edited since apply")


def run(args) -> int:
    target = resolve_target(args)
    with guarded("revert", str(target.root)), target_lock(target):
        if target.is_git:
            _revert_checkout(target)
        elif journal.has_leftover(target.root):
            with write_phase(f"{target.root} is as it was"):
                journal.discard_leftover(target.root)
            say(f"{target.root} was not patched: removed what an interrupted run left in {journal.JOURNAL_DIR}/")
        else:
            record = journal.read_journal(target.root)
            with write_phase(f"the series is reverted: {target.root} is as it was"):
                restored = restore_package(target, force=args.force)
            wrong = package_mismatch(target.root, record, "before") if record else []
            if wrong:
                raise FatalError(f"{target.root / wrong[0]} is not as it was after the revert: check it by hand")
            say(f"reverted {target.root}: restored {len(restored)} files byte for byte")
    return 0


def restore_package(target: Target, force: bool) -> list[str]:
    """journal.restore, with a file that cannot be written made a one-line refusal that says where things stand."""
    try:
        return journal.restore(target.root, force=force)
    except OSError as exc:
        record = journal.read_journal(target.root)
        if record is not None and record["state"] == journal.REVERTING:
            where = f"the revert stopped part-way; make it writable, then run `sglpatch recover --sglang {target.root}`"
        else:
            where = f"nothing was changed: {target.root} is as before"
        raise FatalError(f"cannot write {exc.filename or target.root} ({exc.strerror or exc}); {where}") from None


def _revert_checkout(target: Target) -> None:
    git = target.git
    rebase_state.refuse_in_progress(target)
    scratch = git.git_dir() / f"{STATE_FILE}.tmp"
    if scratch.exists():
        scratch.unlink()  # a run killed while writing the state file; the file itself is still whole
    record = read_state(target)
    if record is None:
        raise FatalError(f"{target.root} has no series applied by sglpatch: nothing to revert")
    if record.get("state") in (APPLYING, REVERTING):
        undo_checkout(target, record)
        return
    branch, head = record["branch"], record["head"]
    if git.current_branch() != branch:
        raise FatalError(f"{target.root} is not on {branch} (the series branch); switch to it or revert by hand")
    if git.run("rev-parse", "HEAD") != head:
        raise FatalError(f"{branch} has commits after the series; revert by hand so they are not lost")
    dirty = dirty_paths(target, record.get("touched", []) or ["python/sglang"])
    if dirty:
        raise FatalError(
            f"uncommitted changes under the series' files: {', '.join(dirty[:5])}; commit or stash them first"
        )
    undo_checkout(target, record)


def _check_switched_back(target: Target, record: dict, head: str, err: str) -> None:
    """After `git checkout PREVIOUS`: if git left the series' files (or HEAD) behind, go back onto the branch."""
    git, previous = target.git, record["previous"]
    is_branch = git.rev_parse(f"refs/heads/{previous}") is not None
    commit = git.rev_parse(f"refs/heads/{previous}" if is_branch else previous) or previous
    touched = record.get("touched", []) or ["python/sglang"]
    wrong = checkout_mismatch(target, previous if is_branch else None, commit, touched)
    if not wrong:
        return
    why = next((line for line in err.splitlines() if line.startswith(("error:", "fatal:"))), "")
    cause = f"{wrong[0]}{f' (git: {why})' if why else ''}"
    still = move_checkout(target, record["branch"], commit, touched)
    if still:
        raise FatalError(
            f"git could not switch {target.root} back to {previous}: {cause}; going back to {record['branch']} "
            f"failed too ({still[0]}); fix the cause, then run `sglpatch recover --sglang {target.root}`"
        )
    write_state(target, record)
    raise FatalError(
        f"git could not switch {target.root} back to {previous}: {cause}; nothing was changed: "
        f"it is still on {record['branch']}"
    )


def undo_checkout(target: Target, record: dict) -> str:
    """Back to the branch the series was applied from, the series branch gone; returns what was done."""
    git = target.git
    branch, previous = record["branch"], record["previous"]
    was = record.get("state")
    on_branch = git.current_branch() == branch
    if was in (APPLYING, REVERTING):
        # Our own steps leave these files clean; a git checkout killed half-way (or an edit since) does not.
        dirty = dirty_paths(target, record.get("touched", []) or ["python/sglang"])
        if dirty:
            raise FatalError(
                f"the interrupted {'apply' if was == APPLYING else 'revert'} left changes in {', '.join(dirty[:5])} "
                f"(HEAD is on {git.current_branch() or 'a detached commit'}); nothing was changed: check them, "
                f"then `git checkout -- <files>` and run recover again"
            )
    with write_phase(f"the series is reverted: {target.root} is as it was (on {previous})"):
        if was != REVERTING:
            try:
                write_state(target, {**record, "state": REVERTING})
            except OSError as exc:
                (git.git_dir() / f"{STATE_FILE}.tmp").unlink(missing_ok=True)
                raise FatalError(f"cannot write {git.git_dir()} ({exc.strerror or exc}); nothing was changed") from None
        if on_branch:
            head = git.run("rev-parse", "HEAD")
            _, _, err = git.try_run("checkout", "-q", previous)
            fault_point("checkout: back on the previous branch")
            _check_switched_back(target, record, head, err)
        if git.rev_parse(f"refs/heads/{branch}") is not None:
            git.run("branch", "-q", "-D", branch)
            fault_point("checkout: series branch deleted")
        if "before" in record:  # a rebase's branch: back to the series it was rebased from
            write_state(target, record["before"])
        else:
            (git.git_dir() / STATE_FILE).unlink()
        fault_point("checkout: state file removed")
    action = {APPLYING: "rolled back the interrupted apply", REVERTING: "finished the interrupted revert"}
    done = action.get(was, "reverted")
    say(f"{done} on {target.root}: back on {previous}, branch {branch} removed")
    return done
