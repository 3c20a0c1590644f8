"""Series lines: one series per supported sglang base, each in `patches/<tag>/`.

A line is a folder under patches/ that holds `series` and `pin.json`; its name is the
pinned tag (`v0.5.14`). Lines are ordered by release; the oldest is the default line
(what `make apply` with no argument puts into build/sglang).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglpatch import project
from sglpatch.errors import FatalError
from sglpatch.pin import PIN_FILE
from sglpatch.series import SERIES_FILE


@dataclass(frozen=True)
class Line:
    name: str  # the pinned tag, e.g. v0.5.14
    directory: Path

    @property
    def release(self) -> str:
        return self.name.removeprefix("v")


def _version_of(name: str) -> Version | None:
    try:
        return Version(name.removeprefix("v"))
    except InvalidVersion:
        return None


def all_lines(root: Path | None = None) -> list[Line]:
    """Every line under patches/, oldest release first."""
    root = root or project.patches_root()
    found = [
        Line(folder.name, folder)
        for folder in (sorted(root.iterdir()) if root.is_dir() else [])
        if folder.is_dir()
        and (folder / SERIES_FILE).is_file()
        and (folder / PIN_FILE).is_file()
        and _version_of(folder.name) is not None
    ]
    return sorted(found, key=lambda line: _version_of(line.name))


def default_line(root: Path | None = None) -> Line:
    lines = all_lines(root)
    if not lines:
        where = root or project.patches_root()
        raise FatalError(f"{where} holds no series line (a folder like v0.5.14/ with series and pin.json)")
    return lines[0]
