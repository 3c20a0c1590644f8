"""A series folder's content as one digest: a rebase notices any edit to the folder it will rewrite."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.series import SERIES_FILE, parse_series_text


def folder_files(patch_dir: Path) -> dict[str, bytes]:
    """The series folder's own files: regular, not hidden, not a writer's leftover `.tmp`."""
    if not patch_dir.is_dir():
        return {}
    return {
        path.name: path.read_bytes()
        for path in sorted(patch_dir.iterdir())
        if path.is_file() and not path.is_symlink() and not path.name.startswith(".") and path.suffix != ".tmp"
    }


def folder_digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def own_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files of a series folder a rewrite answers for: all but a `*.patch` its `series` does not list, which
    is the user's (a rewrite leaves it, and a user may move it while a rebase is stopped)."""
    try:
        listed = set(parse_series_text(files.get(SERIES_FILE, b"").decode("utf-8")))
    except (UnicodeDecodeError, FatalError):
        listed = set()
    return {name: data for name, data in files.items() if not name.endswith(".patch") or name in listed}


def series_digest(patch_dir: Path) -> str:
    """The series folder as it is now: its series, patches, pin.json, pr-groups.json and any other file but a
    patch the series does not list."""
    return folder_digest(own_files(folder_files(patch_dir)))
