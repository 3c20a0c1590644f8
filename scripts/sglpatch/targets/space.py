"""Room for a roll-back: disk space set aside before a checkout is switched, freed when it is needed.

A `git checkout` that runs out of space stops part-way: some files written, the
index or HEAD not. Putting the checkout back writes files and the index again,
which needs space the failed switch may have used up. So before switching, apply
and revert write `.git/sglpatch-reserve` (zeros, about what the way back writes:
the series' files, the index, packed-refs); a failure frees it first, then
rolls back. A full disk before anything changed is a plain refusal. The reserve
exists only while the checkout record says a write is under way, and `recover`
removes one a killed run left.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from sglpatch.errors import FatalError, os_reason
from sglpatch.safety.durable import fsync_dir, unlink_if_there
from sglpatch.safety.interrupts import fault_point
from sglpatch.targets.target import Target

RESERVE = "sglpatch-reserve"
_SLACK = 64 * 1024  # the state file written twice, HEAD.lock, ref and reflog files
_PAGE = 4096


def reserve_path(target: Target) -> Path:
    return target.git.git_dir() / RESERVE


def room_to_roll_back(target: Target, touched: list[str]) -> int:
    """Bytes a roll-back of a switch may write: the series' files as they are now, the index, packed-refs."""
    files = [target.root / path for path in touched]
    return sum(_size(f) + _PAGE for f in files if f.is_file()) + _git_room(target)


def room_to_switch_back(target: Target, commit: str, away: str, touched: list[str]) -> int:
    """Bytes `git checkout -f COMMIT` writes coming back from AWAY (with the series' files changed on top):
    COMMIT's version of each file that differs, the index, packed-refs."""
    git = target.git
    changed = set(git.paths("diff", "--name-only", commit, away)) | set(touched)
    size = 0
    for entry in git.entries("ls-tree", "-r", "-l", "-z", commit):
        meta, path = entry.split("\t", 1)
        if path in changed:  # a submodule (gitlink) has no size here: `-`
            size += (int(length) if (length := meta.split()[3]).isdigit() else 0) + _PAGE
    return size + _git_room(target)


def _git_room(target: Target) -> int:
    git_dir, common = target.git.git_dir(), target.git.common_dir()
    return _size(git_dir / "index") + _size(common / "packed-refs") + _SLACK


def make_reserve(target: Target, size: int, path: Path | None = None) -> Path:
    """Set `size` bytes aside (in the git dir, or at `path`); on a full disk nothing is left behind, and the
    refusal says so."""
    path = path or reserve_path(target)
    try:
        with open(path, "wb") as f:
            _allocate(f.fileno(), size)
            os.fsync(f.fileno())
        fsync_dir(path.parent)
    except OSError as exc:
        unlink_if_there(path)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):  # a read-only file system, a folder it may not write
            raise FatalError(f"cannot write {path} ({os_reason(exc)})") from None
        raise FatalError(
            f"not enough free space in {path.parent} ({os_reason(exc)}): a safe switch keeps about "
            f"{size // 1024} KiB aside to roll back with"
        ) from None
    fault_point("space: room to roll back set aside")
    return path


def free_reserve(target: Target, path: Path | None = None) -> None:
    path = path or reserve_path(target)
    if path.exists():
        path.unlink()
        fault_point("space: room to roll back freed")


def _allocate(fd: int, size: int) -> None:
    """Blocks that are really taken: fallocate where the file system has it, written zeros elsewhere."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # not supported here: write the zeros
            raise
    chunk = b"\0" * (1 << 20)
    left = size
    while left > 0:
        left -= os.write(fd, chunk[: min(left, len(chunk))])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
