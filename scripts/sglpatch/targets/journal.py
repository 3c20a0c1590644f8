"""Atomic rewrites of a package folder, with a journal that can put back every byte and mode.

Apply writes everything it needs before the first file of the package changes: the
original bytes of every file it will change (`.sglpatch/originals/N`, with the
file's mode and times), the journal (`applying`: each file's blob and mode before
and after), and every new file's bytes beside its target (`.NAME.sglpatch-tmp`).
A full disk or a read-only folder stops it there, and those are removed: nothing
changed. Then it commits with renames only (each temporary file over its target,
or a removal), which need no free space, and marks the journal `applied`.

Putting files back is renames too: each backup is renamed over its file (a file
the apply created is removed), so a roll-back never needs the space a rewrite
would. Revert marks the journal `reverting` first (an apply's own roll-back and
`recover` of an interrupted apply keep `applying`: the direction is the same),
then deletes journal.json before the rest of `.sglpatch/`. A run cut short leaves
every file as it was or as it will be, and the journal says which to put back:
journal.json exists exactly while the package may differ from how it was, so a
`.sglpatch/` without it is scratch left by a run killed before its first write to
the package or after its last (`sglpatch recover` removes it).

Bytecode of a rewritten module is removed with it (journaled like a file the
series deletes; see _bytecode.py), and a revert removes what Python compiled from
the patched source meanwhile.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import blob_id
from sglpatch.safety.durable import fsync_dir, remove_durably, unlink_if_there, write_durably, write_synced
from sglpatch.safety.interrupts import fault_point
from sglpatch.targets._bytecode import bytecode_of, is_bytecode
from sglpatch.targets._record_file import load_json_record
from sglpatch.targets.ownership import give_to_folder_owner, with_executable
from sglpatch.targets.target import JOURNAL_DIR
from sglpatch.targets.write_states import WriteState

JOURNAL_FILE = "journal.json"
NEW_FILE_MODE = 0o644


@dataclass
class Change:
    path: Path  # file in the target
    before: bytes | None
    after: bytes | None
    executable: bool = False  # the file after the change (git's 100755)


@dataclass
class JournalEntry:
    """One file the apply writes: its blob before and after ("" when absent), and how to put it back."""

    path: str  # relative to the package folder
    before: str
    after: str
    mode: int  # permission bits before (NEW_FILE_MODE for a file the apply creates)
    backup: str | None  # the original bytes, under the journal folder; None when the apply creates the file
    created_dirs: list[str] = field(default_factory=list)  # folders the apply made for it, deepest first
    new_mode: int | None = None  # permission bits after, when they differ from `mode`

    @property
    def mode_after(self) -> int:
        return self.mode if self.new_mode is None else self.new_mode

    @classmethod
    def from_json(cls, data) -> JournalEntry:
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("path", "before", "after")):
            raise ValueError("a file entry lacks path, before or after")
        _check_relative(data["path"])
        modes = [data.get("mode"), data.get("new_mode", 0)]
        if not all(isinstance(m, int) and not isinstance(m, bool) and 0 <= m <= 0o7777 for m in modes):
            raise ValueError(f"the entry of {data['path']} has a bad mode")
        backup = data.get("backup")
        if not (backup is None or (isinstance(backup, str) and re.fullmatch(r"originals/\d+", backup))):
            raise ValueError(f"the entry of {data['path']} has a bad backup")
        created = data.get("created_dirs", [])
        if not isinstance(created, list):
            raise ValueError(f"the entry of {data['path']} has a bad folder list")
        for folder in created:
            _check_relative(folder)
        return cls(data["path"], data["before"], data["after"], data["mode"], backup, created, data.get("new_mode"))

    def to_json(self) -> dict:
        data = asdict(self)
        for key in ("created_dirs", "new_mode"):
            if not data[key]:
                del data[key]
        return data


def _check_relative(path) -> None:
    """A path a journal names must stay inside the package folder and out of the journal's own folder."""
    parts = path.split("/") if isinstance(path, str) else [""]
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[0] == JOURNAL_DIR:
        raise ValueError(f"{str(path)[:60]!r} is not a path inside the package")


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
    give_to_folder_owner(journal_dir / JOURNAL_FILE)


def journal_path(package: Path) -> Path:
    return package / JOURNAL_DIR / JOURNAL_FILE


def read_journal(package: Path) -> Journal | None:
    path = journal_path(package)
    if not path.exists():
        return None
    return load_json_record(path, Journal.from_json, "restore the package from its wheel")


def has_leftover(package: Path) -> bool:
    """A `.sglpatch/` without journal.json: a run was killed before or after writing the package."""
    return (package / JOURNAL_DIR).exists() and not journal_path(package).exists()


def discard_leftover(package: Path) -> None:
    shutil.rmtree(package / JOURNAL_DIR)
    fault_point("journal: leftover removed")


def with_bytecode(changes: list[Change]) -> list[Change]:
    """`changes`, plus the removal of the cached bytecode of each module they rewrite."""
    stale = [Change(pyc, pyc.read_bytes(), None) for change in changes for pyc in bytecode_of(change.path)]
    return changes + stale


# -- apply -------------------------------------------------------------------------------


def write_changes(package: Path, changes: list[Change], series_digest: str, patch_names: list[str]) -> Journal:
    """Write `changes` into the package: all of them (the journal written), or (FatalError saying so) none."""
    journal_dir = package / JOURNAL_DIR
    if journal_dir.exists():
        raise FatalError(f"{journal_dir} exists: an earlier run was interrupted; run `sglpatch recover` first")
    _refuse_too_long(package, [c.path for c in changes] + [journal_dir / "originals" / str(len(changes))])
    refuse_other_owners(package, changes)
    entries = [_entry(package, number, change) for number, change in enumerate(changes)]
    journal = Journal(WriteState.APPLYING, series_digest, patch_names, entries)
    try:
        _prepare(package, journal, changes)
    except OSError as exc:
        _discard_prepared(package, journal, exc)
    try:
        for change, entry in zip(changes, entries, strict=True):
            _commit(change.path, entry)
        journal.state = WriteState.APPLIED
        _write_journal(journal_dir, journal)
    except OSError as exc:
        _roll_back_after(package, exc)
    return journal


def _entry(package: Path, number: int, change: Change) -> JournalEntry:
    existed = change.before is not None
    mode = change.path.stat().st_mode & 0o7777 if existed else NEW_FILE_MODE
    new_mode = with_executable(mode, change.executable) if existed else (0o755 if change.executable else NEW_FILE_MODE)
    return JournalEntry(
        path=str(change.path.relative_to(package)),
        before=blob_id(change.before) if existed else "",
        after=blob_id(change.after) if change.after is not None else "",
        mode=mode,
        backup=f"originals/{number}" if existed else None,
        created_dirs=_missing_parents(package, change.path),
        new_mode=new_mode if change.after is not None and new_mode != mode else None,
    )


def _prepare(package: Path, journal: Journal, changes: list[Change]) -> None:
    """Everything that needs free space, before the first file of the package changes: the backups, the
    journal, and each new file's bytes beside its target."""
    journal_dir = package / JOURNAL_DIR
    (journal_dir / "originals").mkdir(parents=True)
    give_to_folder_owner(journal_dir)
    give_to_folder_owner(journal_dir / "originals")
    fault_point("journal: folder made")
    for change, entry in zip(changes, journal.files, strict=True):
        if entry.backup:
            _write_backup(change.path, journal_dir / entry.backup, change.before)
    _write_journal(journal_dir, journal)
    fsync_dir(journal_dir)
    for change, entry in zip(changes, journal.files, strict=True):
        if change.after is not None:
            for folder in reversed(entry.created_dirs):
                (package / folder).mkdir(exist_ok=True)
                give_to_folder_owner(package / folder)
            write_synced(_tmp_for(change.path), change.after, mode=entry.mode_after)
            if change.before is not None:
                _own_like(_tmp_for(change.path), change.path.stat())
            else:
                give_to_folder_owner(_tmp_for(change.path))
            fault_point(f"package: {change.path.name} written beside")
    for folder in {change.path.parent for change in changes}:
        if folder.is_dir():
            fsync_dir(folder)


def _write_backup(original: Path, backup: Path, data: bytes) -> None:
    """The original's bytes, mode, owner and times: renamed back over the file, it is the file as it was."""
    write_durably(backup, data, mode=original.stat().st_mode & 0o7777)
    info = original.stat()
    _own_like(backup, info)
    os.utime(backup, ns=(info.st_atime_ns, info.st_mtime_ns))


def _own_like(path: Path, info: os.stat_result) -> None:
    """Root's file takes the owner in `info`; an ordinary user's is the user's own (apply refused otherwise)."""
    if os.geteuid() == 0 and (info.st_uid, info.st_gid) != (0, 0):
        os.chown(path, info.st_uid, info.st_gid)


def refuse_other_owners(package: Path, changes: list[Change]) -> None:
    """Not root: a file another user owns would come back (and be patched) as this user's: refuse, unwritten."""
    me = os.geteuid()
    for change in changes:
        if me != 0 and change.before is not None and (uid := change.path.stat().st_uid) != me:
            raise FatalError(
                f"{change.path} is owned by uid {uid}, not by you (uid {me}): a rewritten file would become "
                "yours; nothing was changed: run as its owner (or as root)"
            )


def _discard_prepared(package: Path, journal: Journal, exc: OSError) -> None:
    """A write before the commit failed: remove what was prepared, so the package is as it was."""
    why = f"cannot write {exc.filename or package} ({os_reason(exc)})"
    try:
        for entry in journal.files:
            unlink_if_there(_tmp_for(package / entry.path))
            _remove_empty_dirs(package, entry.created_dirs)
        if (package / JOURNAL_DIR).exists():
            shutil.rmtree(package / JOURNAL_DIR)
    except OSError as again:
        raise FatalError(
            f"{why}, and removing what was prepared failed too ({again.strerror or again}); no file of the "
            f"package was changed: run {hints.recover(package)} when the cause is fixed"
        ) from None
    raise FatalError(f"{why}; nothing was changed: {package} is as it was") from None


def _commit(path: Path, entry: JournalEntry) -> None:
    """One file to its new bytes: the prepared file renamed over it, or the file removed."""
    if not entry.after:
        remove_durably(path, f"package: {path.name} removed")
        return
    os.replace(_tmp_for(path), path)
    fsync_dir(path.parent)
    fault_point(f"package: {path.name} replaced")


def _roll_back_after(package: Path, exc: OSError) -> None:
    why = f"writing {package} failed ({os_reason(exc)})"
    try:
        restore(package)
    except (OSError, FatalError) as again:
        left = files_not_as(package, read_journal(package), "before") if read_journal(package) else []
        raise FatalError(
            f"{why}, and so did the roll-back ({getattr(again, 'strerror', None) or again}); "
            f"{len(left)} files still differ from before ({', '.join(left[:3])}): "
            f"run {hints.recover(package)} when the cause is fixed"
        ) from None
    raise FatalError(f"{why}; rolled back, nothing changed: {package} is as it was") from None


def _missing_parents(package: Path, path: Path) -> list[str]:
    missing, parent = [], path.parent
    while parent != package and not parent.exists():
        missing.append(str(parent.relative_to(package)))
        parent = parent.parent
    return missing


# -- checking ------------------------------------------------------------------------------


def _blob_and_mode(path: Path) -> tuple[str, int | None]:
    if not path.is_file() or path.is_symlink():
        return "", None
    return blob_id(path.read_bytes()), path.stat().st_mode & 0o7777


def is_as(path: Path, entry: JournalEntry, expect: str) -> bool:
    """Whether `path` holds exactly what `entry` says it held "before" or holds "after" (bytes and mode)."""
    blob, mode = _blob_and_mode(path)
    want = getattr(entry, expect)
    if blob != want:
        return False
    return not want or mode == (entry.mode if expect == "before" else entry.mode_after)


def files_not_as(package: Path, journal: Journal, expect: str) -> list[str]:
    """Journaled files whose bytes or mode are not as `expect` ("before" or "after")."""
    return [entry.path for entry in journal.files if not is_as(package / entry.path, entry, expect)]


def changed_files(package: Path, journal: Journal, *, expect: str) -> list[str]:
    """Journaled files whose bytes are neither as before nor as after (expect="either"), or not as `expect`."""
    allowed = {"either": ("before", "after"), "before": ("before",), "after": ("after",)}[expect]
    changed = []
    for entry in journal.files:
        if is_bytecode(entry.path):  # derived from its source: Python rewrites it at will
            continue
        now, _ = _blob_and_mode(package / entry.path)
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


# -- revert --------------------------------------------------------------------------------


def restore(package: Path, force: bool = False) -> list[str]:
    """Put every journaled file back as it was (renames and removals only); returns the restored paths."""
    journal = read_journal(package)
    if journal is None:
        raise FatalError(f"{package} has no sglpatch journal: nothing to revert")
    journal_dir = package / JOURNAL_DIR
    if not force:
        for path in changed_files(package, journal, expect="either")[:1]:
            raise FatalError(
                f"{package / path} changed since sglpatch wrote it; revert would lose that edit (use --force)"
            )
    for entry in journal.files:
        _check_backup(package, journal_dir, entry)
    if journal.state == WriteState.APPLIED:
        _refuse_unwritable(package, [e for e in journal.files if not is_as(package / e.path, e, "before")])
        journal.state = WriteState.REVERTING
        _write_journal(journal_dir, journal)
    for entry in journal.files:
        _put_back(package, journal_dir, entry)
    for entry in journal.files:
        _remove_fresh_bytecode(package, journal, entry)
    os.unlink(journal_dir / JOURNAL_FILE)
    fsync_dir(journal_dir)
    fault_point("journal: journal.json removed")
    shutil.rmtree(journal_dir)
    fault_point("journal: folder removed")
    return [e.path for e in journal.files]


def _check_backup(package: Path, journal_dir: Path, entry: JournalEntry) -> None:
    """Before the first write: the backup of a file still to put back is there and holds its old bytes."""
    if not entry.backup or is_as(package / entry.path, entry, "before"):
        return
    backup = journal_dir / entry.backup
    if not backup.is_file() or blob_id(backup.read_bytes()) != entry.before:
        raise FatalError(f"journal backup for {entry.path} is damaged or missing; nothing was restored from it")


def _put_back(package: Path, journal_dir: Path, entry: JournalEntry) -> None:
    path = package / entry.path
    _remove_tmp(path)
    if is_as(path, entry, "before"):
        pass
    elif entry.backup is None:
        remove_durably(path, f"package: {path.name} removed")
    else:
        if not path.parent.exists():
            path.parent.mkdir(parents=True)
            give_to_folder_owner(path.parent)
        os.replace(journal_dir / entry.backup, path)
        fsync_dir(path.parent)
        fsync_dir(journal_dir / "originals")
        fault_point(f"package: {path.name} put back")
    if entry.backup is None:
        _remove_empty_dirs(package, entry.created_dirs)


def _remove_fresh_bytecode(package: Path, journal: Journal, entry: JournalEntry) -> None:
    """Bytecode Python compiled from the patched source of a module after the apply: not there before."""
    journaled = {package / e.path for e in journal.files}
    for pyc in bytecode_of(package / entry.path):
        if pyc not in journaled:
            remove_durably(pyc, f"package: {pyc.name} removed")


def _refuse_unwritable(package: Path, entries: list[JournalEntry]) -> None:
    """Before a revert starts: every folder it writes in must take a write, or it stops part-way."""
    for entry in entries:
        folder = (package / entry.path).parent
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK, **_EFFECTIVE):
            why = "Read-only file system" if os.statvfs(folder).f_flag & os.ST_RDONLY else "Permission denied"
            raise FatalError(
                f"cannot write {folder} ({why}); nothing was changed: {package} is still patched "
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


def _remove_empty_dirs(package: Path, created: list[str]) -> None:
    for folder in created:  # deepest first
        try:
            (package / folder).rmdir()
        except OSError:
            return


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.sglpatch-tmp")
