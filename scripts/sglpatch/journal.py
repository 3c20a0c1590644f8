"""Atomic rewrites of a package folder, with a journal that can put back every byte.

Apply writes the journal (the original bytes of every file it will change, and
the blob each file will have after) before touching any file, then replaces
each file atomically (write beside it, fsync, rename), then marks the journal
done. Revert restores from the journal. A run cut short leaves every file
either as it was or as it will be, and the journal says which files to put back.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import blob_id

JOURNAL_DIR = ".sglpatch"
JOURNAL_FILE = "journal.json"
APPLYING = "applying"
APPLIED = "applied"


@dataclass
class Change:
    path: Path  # file in the target
    before: bytes | None
    after: bytes | None


def journal_path(package: Path) -> Path:
    return package / JOURNAL_DIR / JOURNAL_FILE


def read_journal(package: Path) -> dict | None:
    path = journal_path(package)
    if not path.exists():
        return None
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
        if journal.get("state") not in (APPLYING, APPLIED) or not isinstance(journal.get("files"), list):
            raise ValueError("unknown state")
        return journal
    except (ValueError, UnicodeDecodeError) as exc:
        raise FatalError(f"{path} is corrupt ({exc}); restore the package from its wheel") from None


def write_changes(package: Path, changes: list[Change], series_digest: str, patch_names: list[str]) -> None:
    journal_dir = package / JOURNAL_DIR
    originals = journal_dir / "originals"
    originals.mkdir(parents=True)
    entries = []
    for number, change in enumerate(changes):
        entry = {
            "path": str(change.path.relative_to(package)),
            "before": blob_id(change.before) if change.before is not None else "",
            "after": blob_id(change.after) if change.after is not None else "",
            "mode": change.path.stat().st_mode & 0o777 if change.path.exists() else 0o644,
            "backup": None,
        }
        if change.before is not None:
            entry["backup"] = f"originals/{number}"
            _write_durably(journal_dir / entry["backup"], change.before)
        entries.append(entry)
    journal = {"version": 1, "state": APPLYING, "series": series_digest, "patches": patch_names, "files": entries}
    _write_durably(journal_dir / JOURNAL_FILE, json.dumps(journal, indent=2).encode())
    _fsync_dir(journal_dir)
    for change, entry in zip(changes, entries, strict=True):
        _replace(change.path, change.after, entry["mode"])
    journal["state"] = APPLIED
    _write_durably(journal_dir / JOURNAL_FILE, json.dumps(journal, indent=2).encode())


def restore(package: Path, force: bool = False) -> list[str]:
    """Put every journaled file back as it was; returns the restored paths."""
    journal = read_journal(package)
    if journal is None:
        raise FatalError(f"{package} has no sglpatch journal: nothing to revert")
    journal_dir = package / JOURNAL_DIR
    entries = journal["files"]
    for entry in entries:
        current = package / entry["path"]
        now = blob_id(current.read_bytes()) if current.is_file() else ""
        if now not in (entry["before"], entry["after"]) and not force:
            raise FatalError(f"{current} changed since sglpatch wrote it; revert would lose that edit (use --force)")
    for entry in entries:
        backup = journal_dir / entry["backup"] if entry["backup"] else None
        data = backup.read_bytes() if backup else None
        if data is not None and blob_id(data) != entry["before"]:
            raise FatalError(f"journal backup for {entry['path']} is damaged; nothing was restored from it")
        _replace(package / entry["path"], data, entry["mode"])
    shutil.rmtree(journal_dir)
    return [e["path"] for e in entries]


def _replace(path: Path, data: bytes | None, mode: int) -> None:
    if data is None:
        if path.exists():
            path.unlink()
            _fsync_dir(path.parent)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.sglpatch-tmp")
    _write_durably(tmp, data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
