"""The lock files git leaves in a repository, and whose they are.

git takes a lock by creating `<file>.lock` (the index, HEAD, a ref, packed-refs),
writes the new content there and renames it over the file. A git killed in between
leaves the lock, and every later git that needs the file refuses ("Unable to create
….lock: File exists"). `recover` removes a lock only when it was left by the
interrupted sglpatch run: the run named in the state file (written before each git
call) is dead (a zombie its parent has not collected yet counts as dead: an OOM kill
or a supervisor's kill leaves one until the parent waits for it), the lock is
younger than that file, and no live process holds it, neither with the file open
nor as a git process working in the repository. A lock of a git that is still
running is never removed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.safety.interrupts import fault_point
from sglpatch.safety.run_mark import RunMark, dead_but_listed

_PROC = Path("/proc")


@dataclass(frozen=True)
class GitLock:
    path: Path
    holders: tuple[str, ...]  # live processes that hold it or work in the repository ("pid 12 (git checkout)")
    ours: bool  # left by the interrupted sglpatch run (dead now), after it wrote its state

    def describe(self) -> str:
        if self.holders:
            return f"{self.path} (held: {self.holders[0]})"
        return f"{self.path} ({'left by the interrupted sglpatch run' if self.ours else 'not left by sglpatch'})"


# Written only while git holds packed-refs.lock, then renamed over packed-refs: a killed git leaves both.
_LOCKED_TEMPORARY = ("packed-refs.new",)
# The files in the git dir that the git commands sglpatch runs write (checkout, fetch, branch, update-ref,
# read-tree, cherry-pick), besides every ref under refs/. A lock on one of them is a git sglpatch would run
# into; a lock on anything else (gc.log.lock of a background `git gc --auto`, config.lock) is work git itself
# lets commands run beside, and so does sglpatch.
_IN_THE_WAY = {
    f"{name}.lock"
    for name in ("index", "HEAD", "ORIG_HEAD", "FETCH_HEAD", "CHERRY_PICK_HEAD", "MERGE_MSG", "AUTO_MERGE")
} | {"packed-refs.lock", *_LOCKED_TEMPORARY}
# git's housekeeping (what `git gc --auto` and `git maintenance` run, often in the background): such a git
# locks only refs and packed-refs, and holds each lock open while it has it, so it holds no lock it has not
# open; any other git working in the repository may be between closing a lock and renaming it.
_HOUSEKEEPING = {"gc", "maintenance", "repack", "pack-objects", "prune", "prune-packed", "pack-refs", "reflog"}
_HOUSEKEEPING |= {"commit-graph", "multi-pack-index", "rerere", "worktree", "count-objects"}


def lock_files(git_dir: Path, common_dir: Path) -> list[Path]:
    """Every git lock in the repository's own folders (a worktree's and the shared one), objects aside, and
    the temporary files git writes under a lock."""
    found: set[Path] = set()
    for folder in {git_dir, common_dir}:
        found |= {path for path in folder.glob("*.lock") if path.is_file()}
        found |= {folder / name for name in _LOCKED_TEMPORARY if (folder / name).is_file()}
        if (folder / "refs").is_dir():
            found |= {path for path in (folder / "refs").rglob("*.lock") if path.is_file()}
    return sorted(found)


def classify(paths: list[Path], state_file: Path | None, run: RunMark | None, repo: list[Path]) -> tuple[GitLock, ...]:
    """Each lock in `paths`, with its live holders, and whether the run `run` that wrote `state_file` left it."""
    if not paths:
        return ()
    users, holding = _live_users(repo, paths)
    since = _mtime(state_file) if state_file is not None else None
    dead = run is not None and not run.alive()
    locks = []
    for path in paths:
        holders = tuple(holding.get(path, ()) + users)
        made = _mtime(path)
        ours = not holders and dead and since is not None and made is not None and made >= since
        if ours or in_the_way(path, repo):  # another's lock on what sglpatch never writes is not its business
            locks.append(GitLock(path, holders, ours))
    return tuple(locks)


def in_the_way(lock: Path, repo: list[Path]) -> bool:
    """Whether `lock` locks a file that sglpatch's git calls write: a ref, packed-refs, HEAD, the index."""
    return lock.name in _IN_THE_WAY or any(folder / "refs" in lock.parents for folder in repo)


def remove_own(locks: tuple[GitLock, ...], root: Path) -> None:
    """Delete the locks the interrupted run left; refuse, deleting nothing, if any other lock is there."""
    refuse_others(locks, root)
    for lock in locks:
        lock.path.unlink(missing_ok=True)
        fault_point(f"git lock removed: {lock.path.name}")


def refuse_others(locks: tuple[GitLock, ...], root: Path) -> None:
    """Refuse (one line, nothing changed) when a lock is held by a live process or was not the run's."""
    for lock in locks:
        if lock.holders:
            raise FatalError(
                f"{lock.path} is in use ({lock.holders[0]}): a git process still works in {root}; "
                "nothing was changed: wait for it to finish, then run recover again"
            )
        if not lock.ours:
            raise FatalError(
                f"{lock.path} was not left by the interrupted sglpatch run; nothing was changed: "
                f"if no git process runs in {root}, delete it, then run recover again"
            )


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _live_users(repo: list[Path], locks: list[Path]) -> tuple[tuple[str, ...], dict[Path, tuple[str, ...]]]:
    """(git processes working in `repo`, processes holding each lock open). Without /proc nothing can be
    told apart, so every lock counts as held."""
    if not _PROC.is_dir():
        unknown = ("no /proc to tell whether a git process holds it",)
        return unknown, {}
    wanted = {str(lock.resolve()): lock for lock in locks}
    folders = [str(folder.resolve()) for folder in repo]
    users: list[str] = []
    holding: dict[Path, tuple[str, ...]] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit() or int(entry.name) == os.getpid() or dead_but_listed(int(entry.name)):
            continue
        proc = Path(entry.path)
        try:
            name = (proc / "comm").read_text().strip()
        except OSError:
            continue
        who = f"pid {entry.name} ({_command_line(proc) or name})"
        for lock in _open_files(proc) & wanted.keys():
            holding[wanted[lock]] = holding.get(wanted[lock], ()) + (who,)
        if name.startswith("git") and _works_in(proc, folders) and _subcommand(proc) not in _HOUSEKEEPING:
            users.append(who)
    return tuple(users), holding


def _open_files(proc: Path) -> set[str]:
    opened = set()
    try:
        descriptors = list(os.scandir(proc / "fd"))
    except OSError:  # another user's process, or one that has just ended
        return opened
    for fd in descriptors:
        try:
            opened.add(os.readlink(fd.path))
        except OSError:
            continue
    return opened


def _works_in(proc: Path, folders: list[str]) -> bool:
    try:
        cwd = os.readlink(proc / "cwd")
    except OSError:
        return False
    return any(cwd == folder or cwd.startswith(folder + os.sep) for folder in folders)


def _command_line(proc: Path) -> str:
    return " ".join(_words(proc))[:80]


def _words(proc: Path) -> list[str]:
    try:
        words = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    return [w.decode(errors="replace") for w in words if w]


def _subcommand(proc: Path) -> str | None:
    """The git command a git process runs (`gc` for `git -c x=y gc --auto`), or None."""
    words = _words(proc)
    start = next((i + 1 for i, word in enumerate(words) if os.path.basename(word).startswith("git")), len(words))
    rest = iter(words[start:])
    for word in rest:
        if word in ("-c", "-C", "--git-dir", "--work-tree", "--namespace", "--exec-path"):
            next(rest, None)  # the option's value
        elif not word.startswith("-"):
            return word
    return None
