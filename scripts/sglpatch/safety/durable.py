"""Durable writes: every file the toolkit writes to keep a promise goes through here.

A file is written beside its final name, fsynced, renamed over it, and its folder
fsynced: a reader sees the old bytes or the new, never part of them, even after a
power cut. Each step can carry a fault point, so the fault grid cuts there.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglpatch.safety.interrupts import fault_point


def write_durably(
    path: Path,
    data: bytes,
    fault_points: bool = True,
    *,
    mode: int | None = None,
    beside: Path | None = None,
    step_names: tuple[str, str] | None = None,
) -> None:
    """Write `data` to `beside` (default `<name>.tmp`), fsync, rename to `path`, fsync the folder.

    `fault_points=False` for callers that mark the step with a fault point of their own; `step_names`
    names the two fault points (written beside, renamed) when the caller's grid names them otherwise.
    A write or rename that fails (a full disk) leaves `path` as it was and no file beside it."""
    tmp = beside or path.with_name(path.name + ".tmp")
    written, renamed = step_names or (f"durable: {path.name} written beside", f"durable: {path.name} renamed")
    write_synced(tmp, data, mode=mode)
    try:
        if fault_points:
            fault_point(written)
        os.replace(tmp, path)
    except OSError:
        unlink_if_there(tmp)
        raise
    fsync_dir(path.parent)
    if fault_points:
        fault_point(renamed)


def write_synced(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Create `path` holding `data`, on disk (fsync) before this returns; a failed write leaves no part of it."""
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(path, mode)
    except OSError:
        unlink_if_there(path)
        raise


def remove_durably(path: Path, step_name: str) -> None:
    """Delete `path` (when it is there) and fsync its folder, so the removal survives a power cut."""
    if path.exists():
        path.unlink()
        fsync_dir(path.parent)
        fault_point(step_name)


def unlink_if_there(path: Path) -> None:
    """Remove `path` when it is there. A missing one needs no write: on a read-only file system unlink()
    refuses even a name that does not exist (EROFS, which `missing_ok` does not cover)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        if os.path.lexists(path):
            raise


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
