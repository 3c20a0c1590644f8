"""Atomic rewrites of a package folder, with a journal that can put back every byte.

Apply writes the journal (the original bytes of every file it will change, and
the blob each file will have after) before touching any file, then replaces
each file atomically (write beside it, fsync, rename), then marks the journal
done. Revert marks the journal `reverting`, restores from it, then deletes
journal.json before the rest of `.sglpatch/`. A run cut short leaves every file
either as it was or as it will be, and the journal says which files to put back:
journal.json exists exactly while the package may differ from how it was, so a
`.sglpatch/` without it is scratch left by a run killed before its first write
to the package or after its last (`sglpatch recover` removes it).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglpatch.durable import fsync_dir, remove_durably, write_durably
from sglpatch.errors import CorruptState, FatalError
from sglpatch.git import blob_id
from sglpatch.interrupts import fault_point
from sglpatch.write_states import WriteState

JOURNAL_DIR = ".sglpatch"
JOURNAL_FILE = "journal.json"


@dataclass
class Change:
    path: Path  # file in the target
    before: bytes | None
    after: bytes | None


@dataclass
class JournalEntry:
    """One file the apply writes: its blob before and after ("" when absent), and how to put it back."""

    path: str  # relative to the package folder
    before: str
    after: str
    mode: int
    backup: str | None  # the original bytes, under the journal folder; None when the apply creates the file
    created_dirs: list[str] = field(default_factory=list)  # folders the apply made for it, deepest first

    @classmethod
    def from_json(cls, data) -> JournalEntry:
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("path", "before", "after")):
            raise ValueError("a file entry lacks path, before or after")
        if not isinstance(data.get("mode"), int) or not (data.get("backup") is None or isinstance(data["backup"], str)):
            raise ValueError(f"the entry of {data['path']} has a bad mode or backup")
        return cls(
            data["path"], data["before"], data["after"], data["mode"], data["backup"], data.get("created_dirs", [])
        )

    def to_json(self) -> dict:
        data = asdict(self)
        if not self.created_dirs:
            del data["created_dirs"]
        return data


@dataclass
class Journal:
    """`.sglpatch/journal.json`: which series was applied, and every file it wrote."""

    state: WriteState
    series: str  # the series' digest
    patches: list[str]
    files: list[JournalEntry]
    version: int = 1

    @classmethod
    def from_json(cls, data) -> Journal:
        if not isinstance(data, dict) or data.get("state") not in tuple(WriteState):
            raise ValueError("unknown state")
        if not isinstance(data.get("files"), list):
            raise ValueError("no file list")
        files = [JournalEntry.from_json(entry) for entry in data["files"]]
        return cls(
            WriteState(data["state"]), data.get("series", ""), data.get("patches", []), files, data.get("version", 1)
        )

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "state": str(self.state),
            "series": self.series,
            "patches": self.patches,
            "files": [entry.to_json() for entry in self.files],
        }


def _write_journal(journal_dir: Path, journal: Journal) -> None:
    write_durably(journal_dir / JOURNAL_FILE, json.dumps(journal.to_json(), indent=2).encode())


def journal_path(package: Path) -> Path:
    return package / JOURNAL_DIR / JOURNAL_FILE


def read_journal(package: Path) -> Journal | None:
    path = journal_path(package)
    if not path.exists():
        return None
    try:
        return Journal.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptState(f"{path} is corrupt ({exc}); restore the package from its wheel") from None


def has_leftover(package: Path) -> bool:
    """A `.sglpatch/` without journal.json: a run was killed before or after writing the package."""
    return (package / JOURNAL_DIR).exists() and not journal_path(package).exists()


def discard_leftover(package: Path) -> None:
    shutil.rmtree(package / JOURNAL_DIR)
    fault_point("journal: leftover removed")


def write_changes(package: Path, changes: list[Change], series_digest: str, patch_names: list[str]) -> None:
    journal_dir = package / JOURNAL_DIR
    if journal_dir.exists():
        raise FatalError(f"{journal_dir} exists: an earlier run was interrupted; run `sglpatch recover` first")
    _refuse_too_long(package, [c.path for c in changes] + [journal_dir / "originals" / str(len(changes))])
    originals = journal_dir / "originals"
    originals.mkdir(parents=True)
    fault_point("journal: folder made")
    entries = []
    for number, change in enumerate(changes):
        entry = JournalEntry(
            path=str(change.path.relative_to(package)),
            before=blob_id(change.before) if change.before is not None else "",
            after=blob_id(change.after) if change.after is not None else "",
            mode=change.path.stat().st_mode & 0o777 if change.path.exists() else 0o644,
            backup=f"originals/{number}" if change.before is not None else None,
            created_dirs=_missing_parents(package, change.path),
        )
        if entry.backup:
            write_durably(journal_dir / entry.backup, change.before)
        entries.append(entry)
    journal = Journal(WriteState.APPLYING, series_digest, patch_names, entries)
    _write_journal(journal_dir, journal)
    fsync_dir(journal_dir)
    try:
        for change, entry in zip(changes, entries, strict=True):
            _replace(change.path, change.after, entry.mode)
    except OSError as exc:
        _roll_back_after(package, exc)
    journal.state = WriteState.APPLIED
    _write_journal(journal_dir, journal)


def _roll_back_after(package: Path, exc: OSError) -> None:
    try:
        restore(package)
    except (OSError, FatalError) as again:
        raise FatalError(
            f"writing {package} failed ({exc.strerror or exc}) and so did the roll-back ({again}); "
            "run `sglpatch recover` when the cause is fixed"
        ) from None
    raise FatalError(f"writing {package} failed ({exc.strerror or exc}); rolled back: it is as it was") from None


def _missing_parents(package: Path, path: Path) -> list[str]:
    missing, parent = [], path.parent
    while parent != package and not parent.exists():
        missing.append(str(parent.relative_to(package)))
        parent = parent.parent
    return missing


def changed_files(package: Path, journal: Journal, *, expect: str) -> list[str]:
    """Journaled files whose bytes are neither as before nor as after (expect="either"), or not as `expect`."""
    allowed = {"either": ("before", "after"), "before": ("before",), "after": ("after",)}[expect]
    changed = []
    for entry in journal.files:
        current = package / entry.path
        now = blob_id(current.read_bytes()) if current.is_file() and not current.is_symlink() else ""
        if now not in [getattr(entry, key) for key in allowed]:
            changed.append(entry.path)
    return changed


def stray_files(package: Path, journal: Journal) -> list[Path]:
    """Temporary files a killed write left: beside journaled files, and in the journal folder."""
    journal_dir = package / JOURNAL_DIR
    expected = {journal_dir / JOURNAL_FILE} | {journal_dir / e.backup for e in journal.files if e.backup}
    stray = [p for p in journal_dir.rglob("*") if p.is_file() and p not in expected]
    stray += [_tmp_for(package / e.path) for e in journal.files if _tmp_for(package / e.path).exists()]
    return stray


def remove_stray(package: Path, journal: Journal) -> int:
    stray = stray_files(package, journal)
    for path in stray:
        path.unlink()
        fault_point("journal: stray file removed")
    return len(stray)


def restore(package: Path, force: bool = False) -> list[str]:
    """Put every journaled file back as it was; returns the restored paths."""
    journal = read_journal(package)
    if journal is None:
        raise FatalError(f"{package} has no sglpatch journal: nothing to revert")
    journal_dir = package / JOURNAL_DIR
    if not force:
        for path in changed_files(package, journal, expect="either")[:1]:
            raise FatalError(
                f"{package / path} changed since sglpatch wrote it; revert would lose that edit (use --force)"
            )
    originals = [_original(journal_dir, entry) for entry in journal.files]
    if journal.state == WriteState.APPLIED:
        _refuse_unwritable(package, [e for e in journal.files if not _is_as_before(package, e)])
    if journal.state != WriteState.REVERTING:
        journal.state = WriteState.REVERTING
        _write_journal(journal_dir, journal)
    for entry, data in zip(journal.files, originals, strict=True):
        path = package / entry.path
        if not _is_as_before(package, entry):  # a file the interrupted write never reached needs no write
            _replace(path, data, entry.mode)
        _remove_tmp(path)
        if data is None:
            _remove_empty_dirs(package, entry.created_dirs)
    os.unlink(journal_dir / JOURNAL_FILE)
    fsync_dir(journal_dir)
    fault_point("journal: journal.json removed")
    shutil.rmtree(journal_dir)
    fault_point("journal: folder removed")
    return [e.path for e in journal.files]


def _is_as_before(package: Path, entry: JournalEntry) -> bool:
    path = package / entry.path
    if not entry.before:
        return not os.path.lexists(path)
    try:
        return blob_id(path.read_bytes()) == entry.before and path.stat().st_mode & 0o777 == entry.mode
    except OSError:
        return False


def _refuse_unwritable(package: Path, entries: list[JournalEntry]) -> None:
    """Before a revert starts: every folder it writes in must take a write, or it stops part-way."""
    for entry in entries:
        folder = (package / entry.path).parent
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK, **_EFFECTIVE):
            raise FatalError(
                f"cannot write {folder} (Permission denied); nothing was changed: {package} is still patched "
                "(make the folder writable, then revert again)"
            )


_EFFECTIVE = {"effective_ids": True} if os.access in os.supports_effective_ids else {}


def _refuse_too_long(package: Path, paths: list[Path]) -> None:
    """Before the first write: a path (or the temporary name beside it) the file system cannot take would make
    the apply fail half-way, and its roll-back too."""
    path_max, name_max = os.pathconf(package, "PC_PATH_MAX"), os.pathconf(package, "PC_NAME_MAX")
    for path in paths:
        for candidate in (path, _tmp_for(path)):
            size = len(os.fsencode(candidate))
            if size >= path_max or len(os.fsencode(candidate.name)) > name_max:
                raise FatalError(
                    f"{candidate} is too long for the file system ({size} bytes; it takes {path_max - 1}, "
                    f"names up to {name_max}); nothing was changed: move the package to a shorter path"
                )


def _remove_tmp(path: Path) -> None:
    """Remove the temporary file beside `path`; a name too long to exist is no error."""
    try:
        _tmp_for(path).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise


def _original(journal_dir: Path, entry: JournalEntry) -> bytes | None:
    """The bytes `entry` had before the apply (None: it did not exist), checked against its blob id."""
    data = (journal_dir / entry.backup).read_bytes() if entry.backup else None
    if data is not None and blob_id(data) != entry.before:
        raise FatalError(f"journal backup for {entry.path} is damaged; nothing was restored from it")
    return data


def _remove_empty_dirs(package: Path, created: list[str]) -> None:
    for folder in created:  # deepest first
        try:
            (package / folder).rmdir()
        except OSError:
            return


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.sglpatch-tmp")


def _replace(path: Path, data: bytes | None, mode: int) -> None:
    if data is None:
        remove_durably(path, f"package: {path.name} removed")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = (f"package: {path.name} written beside", f"package: {path.name} replaced")
    write_durably(path, data, mode=mode, beside=_tmp_for(path), step_names=steps)
