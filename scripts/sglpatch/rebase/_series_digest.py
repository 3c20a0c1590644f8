"""A series folder's content as one digest: a rebase notices any edit to the folder it will rewrite."""

from __future__ import annotations

import hashlib
from pathlib import Path


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


def series_digest(patch_dir: Path) -> str:
    """Every file of the series folder as it is now (pin.json, pr-groups.json and unlisted patches too)."""
    return folder_digest(folder_files(patch_dir))
