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

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sglpatch.durable import fsync_dir, remove_durably, write_durably
from sglpatch.errors import FatalError
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


def journal_path(package: Path) -> Path:
    return package / JOURNAL_DIR / JOURNAL_FILE


def read_journal(package: Path) -> dict | None:
    path = journal_path(package)
    if not path.exists():
        return None
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
        if journal.get("state") not in tuple(WriteState) or not isinstance(journal.get("files"), list):
            raise ValueError("unknown state")
        return journal
    except (ValueError, UnicodeDecodeError) as exc:
        raise FatalError(f"{path} is corrupt ({exc}); restore the package from its wheel") from None


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
    originals = journal_dir / "originals"
    originals.mkdir(parents=True)
    fault_point("journal: folder made")
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
            write_durably(journal_dir / entry["backup"], change.before)
        created = _missing_parents(package, change.path)
        if created:
            entry["created_dirs"] = created
        entries.append(entry)
    journal = {
        "version": 1,
        "state": WriteState.APPLYING,
        "series": series_digest,
        "patches": patch_names,
        "files": entries,
    }
    write_durably(journal_dir / JOURNAL_FILE, json.dumps(journal, indent=2).encode())
    fsync_dir(journal_dir)
    try:
        for change, entry in zip(changes, entries, strict=True):
            _replace(change.path, change.after, entry["mode"])
    except OSError as exc:
        _roll_back_after(package, exc)
    journal["state"] = WriteState.APPLIED
    write_durably(journal_dir / JOURNAL_FILE, json.dumps(journal, indent=2).encode())


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


def changed_files(package: Path, journal: dict, *, expect: str) -> list[str]:
    """Journaled files whose bytes are neither as before nor as after (expect="either"), or not as `expect`."""
    allowed = {"either": ("before", "after"), "before": ("before",), "after": ("after",)}[expect]
    changed = []
    for entry in journal["files"]:
        current = package / entry["path"]
        now = blob_id(current.read_bytes()) if current.is_file() and not current.is_symlink() else ""
        if now not in [entry[key] for key in allowed]:
            changed.append(entry["path"])
    return changed


def stray_files(package: Path, journal: dict) -> list[Path]:
    """Temporary files a killed write left: beside journaled files, and in the journal folder."""
    journal_dir = package / JOURNAL_DIR
    expected = {journal_dir / JOURNAL_FILE} | {journal_dir / e["backup"] for e in journal["files"] if e["backup"]}
    stray = [p for p in journal_dir.rglob("*") if p.is_file() and p not in expected]
    stray += [_tmp_for(package / e["path"]) for e in journal["files"] if _tmp_for(package / e["path"]).exists()]
    return stray


def remove_stray(package: Path, journal: dict) -> int:
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
    entries = journal["files"]
    if not force:
        for path in changed_files(package, journal, expect="either")[:1]:
            raise FatalError(
                f"{package / path} changed since sglpatch wrote it; revert would lose that edit (use --force)"
            )
    originals = []
    for entry in entries:
        backup = journal_dir / entry["backup"] if entry["backup"] else None
        data = backup.read_bytes() if backup else None
        if data is not None and blob_id(data) != entry["before"]:
            raise FatalError(f"journal backup for {entry['path']} is damaged; nothing was restored from it")
        originals.append(data)
    if journal["state"] != WriteState.REVERTING:
        journal["state"] = WriteState.REVERTING
        write_durably(journal_dir / JOURNAL_FILE, json.dumps(journal, indent=2).encode())
    for entry, data in zip(entries, originals, strict=True):
        path = package / entry["path"]
        _replace(path, data, entry["mode"])
        _tmp_for(path).unlink(missing_ok=True)
        if data is None:
            _remove_empty_dirs(package, entry.get("created_dirs", []))
    os.unlink(journal_dir / JOURNAL_FILE)
    fsync_dir(journal_dir)
    fault_point("journal: journal.json removed")
    shutil.rmtree(journal_dir)
    fault_point("journal: folder removed")
    return [e["path"] for e in entries]


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
