"""Byte-for-byte pictures of a folder, for before-and-after comparisons in the tests.

A real sglang checkout is some 3,600 files, and a test pictures its tree several
times (before a refusal, after it, after a recover). Each file's digest is
therefore remembered under the file's stat identity: device, inode, size, mtime
and ctime, in nanoseconds. The kernel moves ctime on every write, truncate, chmod
or rename onto the path, and no call sets it back, so a file whose identity is
unchanged still has the bytes it was hashed with. A file written within the
clock's granularity of being hashed could keep its identity (git's "racy clean"
case): such a file is hashed every time, never remembered. Symbolic links are
never remembered (their target may change under them).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import time

from sglpatch.wheels import file_sha256

_RACY_NS = 100_000_000  # 0.1 s: far above the kernel's file-time granularity (a jiffy, at most 10 ms)
_MAX_REMEMBERED = 300_000  # about 80 checkouts' worth; then the memory starts again
_digests: dict[tuple, str] = {}
_GIT_INDEX = os.path.join(".git", "index")
GIT_ANY_OWNER = ["git", "-c", "safe.directory=*"]  # a tree of another user's is pictured all the same


def file_digest(path: str, info: os.stat_result | None = None) -> str:
    """sha256 of the bytes at `path` (a link is followed); `info` is its lstat when the caller has it."""
    info = info or os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return file_sha256(path)
    key = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    digest = _digests.get(key)
    if digest is None:
        settled_before = time.time_ns() - _RACY_NS
        digest = file_sha256(path)
        if info.st_ctime_ns < settled_before and info.st_mtime_ns < settled_before:
            if len(_digests) >= _MAX_REMEMBERED:
                _digests.clear()
            _digests[key] = digest
    return digest


def tree_state(root) -> dict[str, str]:
    """Byte-for-byte state of a tree: every file (content and mode), folder and link, and the owner of each
    that the tree's top folder's owner does not own.

    In a git checkout, .git/objects and .git/logs are left out (unreachable objects
    and reflog lines are history, not state) and the index is compared by its
    entries (`git ls-files -s`), not its stat cache; every other file in .git
    counts, so a ref, a lock file or a state file left behind shows.
    """
    state: dict[str, str] = {}
    top = os.fspath(root)
    owner = _owner(os.stat(top))
    folders = [(top, "", ())]  # a stack, not recursion: a hostile test nests folders near PATH_MAX
    while folders:
        folder, prefix, parts = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # as os.walk: a folder that cannot be listed is left out
            continue
        in_git = parts[:1] == (".git",)
        for entry in entries:
            rel = prefix + entry.name
            info = entry.stat(follow_symlinks=False)
            other = "" if _owner(info) == owner else f" owned by {_owner(info)}"  # not the tree's owner
            if entry.is_symlink():
                state[rel] = f"link:{os.readlink(entry.path)}{other}"
            elif entry.is_dir():
                if not in_git and rel != ".git" or other:
                    state[rel] = f"dir{other}"
                inner = (*parts, entry.name)
                if inner[:2] not in ((".git", "objects"), (".git", "logs")):
                    folders.append((entry.path, rel + os.sep, inner))
            elif rel != _GIT_INDEX:
                state[rel] = f"{info.st_mode & 0o7777:o}:{file_digest(entry.path, info)}{other}"
            elif other:
                state[rel] = f"index{other}"
    if os.path.isdir(os.path.join(top, ".git")):
        listed = subprocess.run(GIT_ANY_OWNER + ["ls-files", "-s"], cwd=top, capture_output=True, check=True).stdout
        state[".git/index (entries)"] = hashlib.sha256(listed).hexdigest()
    return state


def _owner(info: os.stat_result) -> str:
    return f"{info.st_uid}:{info.st_gid}"


def fingerprint(root) -> dict[str, str]:
    """Every file under root (a link to a file by its target's bytes; the .git folder's index and refs
    included, anything under a folder named `objects` left out) by content hash."""
    result = {}
    top = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(top):
        rel_dir = os.path.relpath(dirpath, top)
        parts = () if rel_dir == "." else tuple(rel_dir.split(os.sep))
        if "objects" in parts:
            dirnames[:] = []
            continue
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name != "objects" and os.path.isfile(path):
                result[os.path.join(rel_dir, name) if parts else name] = file_digest(path)
    return dict(sorted(result.items()))


def refused(sglpatch, target, *args, command="apply"):
    """A command that must refuse: one line, exit 2, no traceback, the target as it was."""
    before = tree_state(target)
    code, out, err = sglpatch(command, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert tree_state(target) == before
    return err
