"""Scratch folders in the temp dir, named after the run that made them, so a killed run's are found.

A run removes its own scratch when it ends, however it ends, except by `kill -9`
or a power cut. Each folder is named `sglpatch-<kind>-<pid>.<start>-<random>`
(`run_mark.RunMark`): `remove_stale` (at the start of every workspace, and in
`recover`) deletes those of runs that are no longer alive, and never one of a run
still working.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from sglpatch.safety.run_mark import RunMark

_NAME = re.compile(r"^sglpatch-[a-z]+-(\d+\.\d+)-[A-Za-z0-9_]+$")


def make_folder(kind: str) -> Path:
    """A new scratch folder `sglpatch-<kind>-<this run>-<random>` in the temp dir."""
    return Path(tempfile.mkdtemp(prefix=f"sglpatch-{kind}-{RunMark.current().label()}-"))


def stale_folders(where: Path | None = None) -> list[Path]:
    """Scratch folders of this user whose run is dead."""
    where = Path(where or tempfile.gettempdir())
    stale = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return []
    for entry in entries:
        match = _NAME.match(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        run = RunMark.from_label(match.group(1))
        if run is not None and not run.alive():
            stale.append(Path(entry.path))
    return stale


def remove_stale(where: Path | None = None) -> int:
    """Delete the scratch folders that killed runs left; returns how many."""
    stale = stale_folders(where)
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return len(stale)
