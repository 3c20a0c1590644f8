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

from sglpatch import hints, scratch
from sglpatch.commands.common import add_line_option, add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.interrupts import fault_point, guarded, write_phase
from sglpatch.output import plural, say
from sglpatch.rebase import rebase_settle
from sglpatch.targets import journal, rebase_store, target_state
from sglpatch.targets.checkout_undo import undo_checkout
from sglpatch.targets.git_locks import refuse_others, remove_own
from sglpatch.targets.target import dirty_paths, target_lock
from sglpatch.targets.target_state import Foreign, Interrupted, Pristine, RebaseInProgress, TargetState
from sglpatch.targets.user_work import commits_past_the_series
from sglpatch.targets.write_check import remove_file_and_emptied_folders, restore_package, tree_blobs
from sglpatch.targets.write_states import WriteState

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
        scratch.remove_stale()
        state = target_state.read(target)
        if isinstance(state, Foreign):
            raise FatalError(state.seen)
        if target.is_git:
            _recover_checkout(state)
        else:
            _recover_package(state, args.force)
    return 0


def _recover_checkout(state: TargetState) -> None:
    target = state.target
    _remove_leftovers(state)
    if isinstance(state, RebaseInProgress):
        rebase = state.rebase
        if state.stopped:
            raise FatalError(
                f"{rebase.describe_stop()} in {target.root}, waiting for you (not an interruption): "
                f"resolve, then {hints.continue_rebase(target.root)}, or {hints.abort_rebase(target.root)} to put everything back"
            )
        refuse_others(state.locks, target.root)
        _refuse_unexplained_changes(state)
        with write_phase():
            remove_own(state.locks, target.root)
            _remove_killed_git_files(state)
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
                "that could not write, or an edit since); nothing was changed: make the files writable and "
                "`git checkout -- <files>`, or commit the edit"
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


def _refuse_unexplained_changes(state: RebaseInProgress) -> None:
    """Rolling a rebase back discards work-tree changes: only when its own steps explain them.

    Between its steps a rebase leaves the work tree clean, and a kill inside `git cherry-pick` leaves
    CHERRY_PICK_HEAD; a git killed inside its own write (the lock it held was the run's) leaves files of the
    two commits it was moving between, or of the patch it was picking. Anything else (an edit since) is not
    guessed at."""
    git, rebase = state.target.git, state.rebase
    if rebase.phase == rebase_store.INSTALLING or (git.git_dir() / "CHERRY_PICK_HEAD").exists():
        return
    changed = git.run("diff", "--name-only", "--no-renames", "HEAD").splitlines()
    if changed and any(lock.ours for lock in state.locks):
        changed = _not_from_the_killed_git(state, changed)
    if changed:
        raise FatalError(
            f"the interrupted rebase left changes in {', '.join(changed[:5])} (HEAD is detached); nothing was "
            "changed: check them, then `git checkout -- <files>` and run recover again"
        )


def _not_from_the_killed_git(state: RebaseInProgress, changed: list[str]) -> list[str]:
    """The changed files a git killed mid-write cannot have left: not as HEAD, ONTO or the original branch
    has them (a checkout between two of those), not missing, and not in the patch being picked."""
    target, rebase = state.target, state.rebase
    commits = [c for c in ("HEAD", rebase.onto, rebase.original_head) if c]
    known = [tree_blobs(target, commit, changed) for commit in commits]
    picking = set()
    if _picking(rebase):
        picked = rebase.commits[rebase.next]
        picking = set(target.git.run("diff-tree", "-r", "--name-only", "--no-commit-id", picked).splitlines())
    now = target.current_blobs(changed)
    return [p for p in changed if now[p] and p not in picking and all(now[p] != blobs.get(p) for blobs in known)]


def _remove_killed_git_files(state: RebaseInProgress) -> None:
    """Files a git killed inside its write made that neither HEAD nor the index knows: those holding exactly the
    bytes of ONTO or of the patch being picked are that git's; rolling back would leave them behind."""
    target, rebase = state.target, state.rebase
    if rebase.phase == rebase_store.INSTALLING or not any(lock.ours for lock in state.locks):
        return
    new = target.git.run("ls-files", "--others", "-z", strip=False).split("\0")
    new = [path for path in new if path]
    if not new:
        return
    sources = [rebase.onto] + ([rebase.commits[rebase.next]] if _picking(rebase) else [])
    known = [tree_blobs(target, commit, new) for commit in sources if commit]
    now = target.current_blobs(new)
    for path in new:
        if now[path] and any(now[path] == blobs.get(path) for blobs in known):
            remove_file_and_emptied_folders(target.root / path, target.root)
            fault_point(f"recover: {path} (written by the killed git) removed")


def _picking(rebase) -> bool:
    return bool(rebase.commits) and rebase.next is not None and rebase.next < len(rebase.commits)


def _recover_package(state: TargetState, force: bool) -> None:
    root = state.target.root
    if isinstance(state, Pristine) and state.leftovers:
        with write_phase(f"{root} is {AS_IT_WAS}"):
            journal.discard_leftover(root)
        say(f"recovered {root}: removed what an interrupted run left in {journal.JOURNAL_DIR}/; it is {AS_IT_WAS}")
        return
    if isinstance(state, Pristine):
        say(f"nothing to recover: {root} has no sglpatch journal; it is {AS_IT_WAS}")
        return
    if isinstance(state, Interrupted):
        applying = state.journal.state == WriteState.APPLYING
        done = "rolled back the interrupted apply" if applying else "finished the revert"
        with write_phase(f"{done}: {root} is {AS_IT_WAS}"):
            restored = restore_package(state.target, force=force)
        say(f"recovered {root}: {done} ({len(restored)} files restored byte for byte); it is {AS_IT_WAS}")
        return
    record = state.journal
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
