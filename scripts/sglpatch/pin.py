"""The pin: which sglang the series is written against, by release and by content.

`patches/pin.json` records the release, the exact PyPI wheel (file name and
sha256) the default base is made from, and the git blob id of every file the
series touches as it is in that wheel. A target is "at the pin" when those
blobs match, whatever its history.

A kind whose releases are git commits (DeepGEMM: `ProjectKind.from_git`) records the commit instead
(`release` its short id, `tag` the line's name `deep_gemm/<short id>`), and under `stand_in` the PyPI
wheel whose package stands in for a checkout where the commit cannot be fetched (rebase/git_releases.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.project_kind import DEFAULT_KIND, KINDS, ProjectKind

PIN_FILE = "pin.json"
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_VERSION = re.compile(r"^\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?$")


@dataclass(frozen=True)
class Wheel:
    filename: str
    sha256: str
    python_version: str
    platform: str


@dataclass(frozen=True)
class Pin:
    release: str
    tag: str
    date: str
    wheel: Wheel
    blobs: dict[str, str]  # upstream-layout path -> blob id ("" when the file is absent)
    project: ProjectKind = DEFAULT_KIND  # what is pinned: pin.json names it, and its wheel is the project's
    commit: str | None = None  # a git kind's pinned commit (its wheel is then the stand-in's)

    @property
    def base_rev(self) -> str:
        """What names the pinned base in a repository: the release tag, or a git kind's commit."""
        return self.commit or self.tag

    def describe(self) -> str:
        """The pin in a message: `sglang 0.5.14`, `deep_gemm 54e2261`."""
        return f"{self.project.name} {self.release}"

    def with_blobs(self, blobs: dict[str, str]) -> "Pin":
        return Pin(self.release, self.tag, self.date, self.wheel, blobs, self.project, self.commit)

    def to_json(self) -> str:
        pinned = {"release": self.release, "tag": self.tag, "date": self.date}
        if self.commit:
            pinned["commit"] = self.commit
        data = {
            self.project.name: pinned,
            _wheel_key(self.project): {
                "filename": self.wheel.filename,
                "sha256": self.wheel.sha256,
                "python_version": self.wheel.python_version,
                "platform": self.wheel.platform,
            },
            "blobs": dict(sorted(self.blobs.items())),
        }
        return json.dumps(data, indent=2) + "\n"


def parse_pin(text: str, origin: str = PIN_FILE, project: ProjectKind = DEFAULT_KIND) -> Pin:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise FatalError(f"{origin}: corrupt pin: not JSON ({exc})") from None
    try:
        pinned, wheel, blobs = data[project.name], data[_wheel_key(project)], data["blobs"]
        release, tag = _RELEASE_SHAPES[project.from_git]
        pin = Pin(
            release=_field(pinned, "release", release),
            tag=_field(pinned, "tag", re.compile(tag.replace("<name>", re.escape(project.name)))),
            date=_field(pinned, "date", re.compile(r"^\d{4}-\d{2}-\d{2}$")),
            wheel=Wheel(
                filename=_field(wheel, "filename", _wheel_name(project)),
                sha256=_field(wheel, "sha256", _SHA256),
                python_version=_field(wheel, "python_version", re.compile(r"^3\.\d+$")),
                platform=_field(wheel, "platform", re.compile(r"^[\w.]+$")),
            ),
            blobs=_blobs(blobs, project),
            project=project,
            commit=_field(pinned, "commit", _SHA1) if project.from_git else None,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise FatalError(f"{origin}: corrupt pin: missing or mistyped field {exc}") from None
    except ValueError as exc:
        raise FatalError(f"{origin}: corrupt pin: {exc}") from None
    return pin


# (release, tag) shapes: a release version and its tag v<release>, or a git kind's short commit id and its line
_RELEASE_SHAPES = {
    False: (_VERSION, r"^v\d[\w.]*$"),
    True: (re.compile(r"^[0-9a-f]{7,40}$"), r"^<name>/[0-9a-f]{7,40}$"),
}


def _wheel_key(project: ProjectKind) -> str:
    """The wheel's section: the release's own, or (a git kind) the one whose package stands in for a checkout."""
    return "stand_in" if project.from_git else "wheel"


def _field(section: dict, key: str, shape: re.Pattern) -> str:
    value = section[key]
    if not isinstance(value, str) or not shape.match(value):
        raise ValueError(f"{key} {value!r} is not valid")
    return value


def _wheel_name(project: ProjectKind) -> re.Pattern:
    return re.compile(rf"^{re.escape(project.wheel_stem)}-[\w.]+-[\w.]+-[\w.]+-[\w.]+\.whl$")


def _blobs(blobs: dict, project: ProjectKind) -> dict[str, str]:
    """Files a series may touch: the package, the project's test tree (tests a patch adds), and a checkout's
    other paths the kind names."""
    prefixes = project.patch_prefixes
    if not isinstance(blobs, dict) or not blobs:
        raise ValueError("blobs must be a non-empty object")
    for path, blob in blobs.items():
        if not isinstance(path, str) or not path.startswith(prefixes) or ".." in path.split("/"):
            raise ValueError(f"blob path {path!r} is not under {' or '.join(prefixes)}")
        if not isinstance(blob, str) or not (blob == "" or _SHA1.match(blob)):
            raise ValueError(f"blob id {blob!r} for {path} is not a git blob id")
    return dict(blobs)


def pinned_kind(patch_dir: Path) -> ProjectKind:
    """The kind a series folder's pin.json pins (its top-level section's name); sglang when it cannot tell."""
    try:
        data = json.loads((Path(patch_dir) / PIN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return DEFAULT_KIND
    found = [kind for kind in KINDS if isinstance(data, dict) and kind.name in data]
    return found[0] if len(found) == 1 else DEFAULT_KIND


def load_pin(patch_dir: Path, project: ProjectKind | None = None) -> Pin:
    """The pin of a series folder, of `project`'s kind (default: the kind the file names)."""
    project = project or pinned_kind(patch_dir)
    path = Path(patch_dir) / PIN_FILE
    if not path.is_file():
        raise FatalError(f"{path}: no pin file")
    try:
        return parse_pin(path.read_text(encoding="utf-8"), str(path), project)
    except UnicodeDecodeError:
        raise FatalError(f"{path}: corrupt pin: not UTF-8 text") from None


def drifted_files(pin: Pin, blobs: dict[str, str]) -> list[str]:
    """Paths whose blob differs from the pin; a missing file counts as ''."""
    return [path for path, expected in sorted(pin.blobs.items()) if blobs.get(path, "") != expected]
