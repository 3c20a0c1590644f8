"""Unpack a bundle archive: `python ci/untar.py ARCHIVE DEST` (ci/gpu_box.sh's extract_archive).

tarfile's "data" filter does it where Python has one (3.11.4 on, and the security releases of 3.8-3.10): no
absolute path, no path or link out of DEST, nothing but files, folders and links, no setuid bits, the unpacking
user as owner. An older Python (Debian 12's 3.11.2) gets the same refusals here, checked before anything is
written: a bundle this script refuses is not unpacked at all.
"""

from __future__ import annotations

import os
import sys
import tarfile


def _inside(root: str, path: str) -> bool:
    resolved = os.path.realpath(os.path.join(root, path))
    return resolved == root or resolved.startswith(root + os.sep)


def _refusal(member: tarfile.TarInfo, root: str, links: set[str]) -> str | None:
    """Why `member` may not be unpacked into `root` (None when it may); `links` are the archive's symlinks."""
    name = member.name
    if os.path.isabs(name) or not _inside(root, name):
        return "its path leaves the folder"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "it is not a file, a folder or a link"
    parents = [os.path.dirname(name)]
    while parents[-1]:
        parents.append(os.path.dirname(parents[-1]))
    if any(parent in links for parent in parents):
        return "its path goes through a link of the archive"
    if member.issym() and (
        os.path.isabs(member.linkname) or not _inside(root, os.path.join(parents[0], member.linkname))
    ):
        return "it links out of the folder"
    if member.islnk() and not _inside(root, member.linkname):
        return "it links out of the folder"
    return None


def _checked_members(tar: tarfile.TarFile, root: str) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    links = {m.name.rstrip("/") for m in members if m.issym()}
    for member in members:
        if why := _refusal(member, root, links):
            sys.exit(f"untar: refusing {tar.name}: member {member.name!r}: {why}; nothing was unpacked")
        member.mode &= 0o755  # no setuid, setgid or sticky bit, no write for group or others
        member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
    return members


def main(archive: str, dest: str) -> None:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest, _checked_members(tar, os.path.realpath(dest)), numeric_owner=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
