"""Modes and owners of what a run writes in a checkout: as they were, whoever runs it and under any umask.

git writes a file by creating it anew: it takes the owner of the process and the mode
0666 (0777) less the umask, whatever the file had. A root run in another user's
checkout (one it trusts: safe.directory) would leave the series' files, the index,
HEAD and every object and ref it made owned by root, which that user can then no
longer write; under `umask 077` the files come back 600; with core.fileMode=false an
executable bit git does not track is dropped. So apply records the mode and owner of
each file the series touches and of the git files its git commands rewrite (HEAD, the
index, packed-refs) in the checkout record, and every run gives them back after its
git commands: apply, its roll-back, revert and recover. What a run creates in the git
dir (objects, refs, the state file) and the files the series creates go to the owner
of the folder they are in, when the run is root's.

A run that is not root cannot give a file to another user: apply refuses, before it
writes, a checkout whose series files or git files someone else owns.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.safety.interrupts import fault_point
from sglpatch.targets.target import Target

GIT_FILES = ("HEAD", "index", "packed-refs")  # the files of the git dir the git commands of a run rewrite
_STARTED_NS = time.time_ns()  # what this process writes is newer than this


def record_stats(target: Target, paths: list[str]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """[mode, uid, gid] of each of `paths` that is a file, and of each of GIT_FILES that exists."""
    files = {p: _stat(target.root / p) for p in paths if (target.root / p).is_file()}
    git = {name: _stat(path) for name, path in _git_files(target).items() if path.is_file()}
    return files, git


def refuse_other_owners(target: Target, files: dict[str, list[int]], git: dict[str, list[int]]) -> None:
    """Not root: a file another user owns could not be given back to them; refuse before the first write."""
    me = os.geteuid()
    if me == 0:
        return
    owned = {**{target.root / p: s for p, s in files.items()}, **{_git_files(target)[n]: s for n, s in git.items()}}
    for path, (_, uid, _gid) in owned.items():
        if uid != me:
            raise FatalError(
                f"{path} is owned by uid {uid}, not by you (uid {me}): what git rewrites would become yours; "
                f"nothing was changed: run as its owner (or as root)"
            )


def give_back(
    target: Target, files: dict[str, list[int]], git: dict[str, list[int]], modes_from: str | None, touched: list[str]
) -> list[str]:
    """The recorded mode and owner of each file still there; for a root run, what it created (the series' new
    files, objects, refs) to the owner of the folder it is in. Returns the files whose owner could not be given
    back (the run is not root). `modes_from` is the commit the recorded modes went with: where the index now
    has another executable bit (the series changes it), the mode takes that bit."""
    flipped = _flipped_executables(target, modes_from, list(files)) if modes_from and files else set()
    left = []
    for path, (mode, uid, gid) in files.items():
        if path in flipped:
            mode = with_executable(mode, add=not mode & 0o111)
        left += _set(target.root / path, mode, uid, gid)
    for name, path in _git_files(target).items():
        if name in git:
            left += _set(path, *git[name])
    if os.geteuid() == 0:
        _hand_over_created(target, [path for path in touched if path not in files])
        for folder in {target.git.git_dir(), target.git.common_dir()}:
            _hand_over_new(folder)
    return left


def _hand_over_created(target: Target, paths: list[str]) -> None:
    """Files (and folders) of `paths` this run created go to the owner of the folder they are in, the
    outermost new folder first, so that each takes its folder's owner once that one has its own."""
    for path in paths:
        chain, local = [], target.root / path
        while local != target.root and local.exists() and _is_new_and_mine(local.lstat()):
            chain.append(local)
            local = local.parent
        for created in reversed(chain):
            give_to_folder_owner(created)


def _stat(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_mode & 0o7777, info.st_uid, info.st_gid]


def _git_files(target: Target) -> dict[str, Path]:
    git_dir, common = target.git.git_dir(), target.git.common_dir()
    return {name: (common if name == "packed-refs" else git_dir) / name for name in GIT_FILES}


def _set(path: Path, mode: int, uid: int, gid: int) -> list[str]:
    if not path.is_file() or path.is_symlink():
        return []
    info = path.stat()
    if info.st_mode & 0o7777 != mode:
        os.chmod(path, mode)
        fault_point(f"ownership: {path.name} mode given back")
    if (info.st_uid, info.st_gid) == (uid, gid):
        return []
    if os.geteuid() != 0:
        return [str(path)]
    os.chown(path, uid, gid)
    fault_point(f"ownership: {path.name} owner given back")
    return []


def _flipped_executables(target: Target, commit: str, paths: list[str]) -> set[str]:
    """The paths whose executable bit in the index differs from the one they have in `commit`."""
    then = _executables(target.git.run("ls-tree", "-r", "-z", commit, "--", *paths, strip=False))
    now = _executables(target.git.run("ls-files", "-s", "-z", "--", *paths, strip=False))
    return then ^ now


def _executables(listed: str) -> set[str]:
    """The paths of `git ls-tree` or `git ls-files -s` lines (the mode first on both) with mode 100755."""
    return {e.split("\t", 1)[1] for e in filter(None, listed.split("\0")) if e.startswith("100755 ")}


def with_executable(mode: int, add: bool) -> int:
    """git's executable bit on permission bits: x wherever r is set, or no x at all."""
    return mode | ((mode & 0o444) >> 2) if add else mode & ~0o111


def _is_new_and_mine(info: os.stat_result) -> bool:
    return info.st_uid == os.geteuid() and info.st_ctime_ns >= _STARTED_NS


def give_to_folder_owner(path: Path) -> None:
    """A root run's new file in a folder another user owns: theirs, as the rest of the folder."""
    owner = path.parent.stat()
    if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
        os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)


def _hand_over_new(folder: Path) -> None:
    """What this root run created under the git dir `folder` (objects, refs, logs, the state file) goes to the
    owner of the git dir. Of the object folders (there may be thousands) only those changed since the run
    started are entered."""
    owner = folder.stat()
    if owner.st_uid == os.geteuid():
        return
    for top, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(top, name)
            info = os.lstat(path)
            if _is_new_and_mine(info):
                os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
        if Path(top).name == "objects" or Path(top).parent.name == "objects":
            dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_mtime_ns >= _STARTED_NS]
