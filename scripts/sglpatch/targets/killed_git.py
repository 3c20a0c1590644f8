"""What a git killed inside its own write left in a checkout, told apart from the user's edits.

git locks a file by creating `<file>.lock` and renaming it into place when done: a git killed in
between leaves the lock (git_locks.py tells the killed run's own from any other). A `git checkout`
killed half-way leaves files of both commits it moved between, or none (git removes a file before
it writes the new one). Settling a run cut short removes its own locks and takes back only files
that hold the bytes of a commit its git was moving between, or none; any other change is an edit
made since, and is refused, changing nothing.
"""

from __future__ import annotations

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.safety.interrupts import fault_point, write_phase
from sglpatch.targets import rebase_store
from sglpatch.targets.checkout_record import CheckoutRecord
from sglpatch.targets.git_locks import GitLock, refuse_others, remove_own
from sglpatch.targets.target import Target, dirty_paths
from sglpatch.targets.target_state import RebaseInProgress
from sglpatch.targets.target_state import read as read_state
from sglpatch.targets.write_check import remove_file_and_emptied_folders, tree_blobs, written_by_git
from sglpatch.targets.write_states import WriteState


def settle_checkout_switch(target: Target, record: CheckoutRecord, locks: tuple[GitLock, ...]) -> list[str]:
    """After a kill in an apply or a revert: remove the git locks the killed run left, and return the series files
    that a `git checkout` killed half-way left between the two branches. Each must hold the series branch's
    bytes, the previous branch's, or be missing; anything else is an edit made since, and nothing is changed."""
    git = target.git
    refuse_others(locks, target.root)
    touched = target.paths_or_package(record.touched)
    dirty = dirty_paths(target, touched)
    if dirty and (edited := _unexplained(target, dirty, [record.head, _commit_of(git, record.previous)])):
        raise FatalError(
            f"the interrupted {'apply' if record.state == WriteState.APPLYING else 'revert'} left changes in "
            f"{', '.join(edited[:5])} (HEAD is on {git.current_branch() or 'a detached commit'}); nothing was "
            f"changed: check them; {hints.put_back_keeping_copies(target.root, edited)}; then run recover again"
        )
    remove_own(locks, target.root)
    return dirty


def settle_rebase_git(state: RebaseInProgress) -> None:
    """Before a rebase cut short is rolled back or finished: refuse any lock not the killed run's and any change
    its own steps do not explain; then remove its locks and the new files its killed git wrote."""
    refuse_others(state.locks, state.target.root)
    _refuse_unexplained_changes(state)
    with write_phase():
        remove_own(state.locks, state.target.root)
        _remove_killed_git_files(state)


def remove_locks_of_a_cut_run(target: Target) -> None:
    """An --abort or a --drop killed inside its git (a closed terminal, an OOM kill) left git's locks (index.lock,
    HEAD.lock, a ref's), which every git after it refuses, and a second --abort (or --drop) stopped at them (or went
    through, one left): removed when that run left them; a lock of another's, or of a live git, is refused,
    nothing changed."""
    state = read_state(target)
    if isinstance(state, RebaseInProgress):
        remove_own(state.locks, target.root)


def _refuse_unexplained_changes(state: RebaseInProgress) -> None:
    """Rolling a rebase back discards work-tree changes: only when its own steps explain them.

    Between its steps a rebase leaves the work tree clean, and a kill inside `git cherry-pick` leaves
    CHERRY_PICK_HEAD; a git killed inside its own write (the lock it held was the run's) leaves files of the
    two commits it was moving between, or of the patch it was picking. Anything else (an edit since) is not
    guessed at."""
    git, rebase = state.target.git, state.rebase
    if rebase.phase == rebase_store.INSTALLING or (git.git_dir() / "CHERRY_PICK_HEAD").exists():
        return
    changed = git.paths("diff", "--name-only", "--no-renames", "HEAD")
    if changed and any(lock.ours for lock in state.locks):
        picking = _picked_paths(state)
        commits = [c for c in ("HEAD", rebase.onto, rebase.original_head) if c]
        changed = [path for path in _unexplained(state.target, changed, commits) if path not in picking]
    if changed:
        raise FatalError(
            f"the interrupted rebase left changes in {', '.join(changed[:5])} (HEAD is detached); nothing was "
            f"changed: check them; {hints.put_back_keeping_copies(state.target.root, changed)}; then run recover again"
        )


def _remove_killed_git_files(state: RebaseInProgress) -> None:
    """Files a git killed inside its write made that neither HEAD nor the index knows: those holding exactly the
    bytes of ONTO or of the patch being picked are that git's; rolling back would leave them behind."""
    target, rebase = state.target, state.rebase
    if rebase.phase == rebase_store.INSTALLING or not any(lock.ours for lock in state.locks):
        return
    new = target.git.paths("ls-files", "--others")
    if not new:
        return
    sources = [rebase.onto] + ([rebase.commits[rebase.next]] if _picking(rebase) else [])
    unexplained = _unexplained(target, new, [commit for commit in sources if commit])
    now = target.current_blobs(new)
    for path in new:
        if now[path] and path not in unexplained:
            remove_file_and_emptied_folders(target.root / path, target.root)
            fault_point(f"recover: {path} (written by the killed git) removed")


def _unexplained(target: Target, paths: list[str], commits: list[str]) -> list[str]:
    """The files of `paths` that are there and hold bytes none of `commits` has at that path, as committed or as
    git writes them (through the user's smudge filter and eol settings)."""
    known = [tree_blobs(target, commit, paths) for commit in commits]
    now = target.current_blobs(paths)
    return [
        path
        for path in paths
        if now[path]
        and all(now[path] != blobs.get(path) for blobs in known)
        and not any(written_by_git(target, commit, path, now[path]) for commit in commits)
    ]


def _picked_paths(state: RebaseInProgress) -> set[str]:
    """The files the patch the rebase was picking when it was killed touches (none between two picks)."""
    rebase = state.rebase
    if not _picking(rebase):
        return set()
    picked = rebase.commits[rebase.next]
    return set(state.target.git.paths("diff-tree", "-r", "--name-only", "--no-commit-id", picked))


def _picking(rebase) -> bool:
    return bool(rebase.commits) and rebase.next is not None and rebase.next < len(rebase.commits)


def _commit_of(git, name: str) -> str:
    return git.rev_parse(f"refs/heads/{name}") or git.rev_parse(name) or name
