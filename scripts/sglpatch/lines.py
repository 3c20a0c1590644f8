"""Series lines: one series per supported sglang base, each in `patches/<tag>/`.

A line is a folder under patches/ that holds `series` and `pin.json`; its name is the
pinned tag (`v0.5.14`), and its pin must say so. Lines are ordered by release:
- the oldest is the default line: `make apply` with no argument builds its base in
  build/sglang, and its CPU tests are tests/patched/ (tree: $SGLPATCH_SGLANG_TREE);
- every other line's default base is build/sglang-<tag>, and its CPU tests are
  tests/patched_<tag, dots as underscores>/ (tree: $SGLPATCH_SGLANG_TREE_<TAG>), run in
  a pytest process of their own (two sglang versions cannot share one process);
- the newest line is the one PRs are built on.

Which line fits a target is decided by its sglang version (`line_for_version`).

A kind whose releases are git commits (DeepGEMM, `project_kind.DEEP_GEMM`) keeps its lines in
`patches/<kind>/<short commit>/`, named `<kind>/<short commit>` (`deep_gemm/54e2261`), listed after
sglang's, oldest pin first; its default base is build/<kind>-<short commit>. The default line and the
newest line (PRs) are sglang's; a DeepGEMM target gets the line of its kind whose pinned files it holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglpatch import hints, project
from sglpatch.errors import FatalError
from sglpatch.pin import PIN_FILE, Pin, load_pin
from sglpatch.project_kind import DEFAULT_KIND, KINDS, ProjectKind
from sglpatch.series import SERIES_FILE

UPSTREAM_FILE = "upstream.json"
TREE_ENV = "SGLPATCH_SGLANG_TREE"


@dataclass(frozen=True)
class Line:
    name: str  # the pinned tag, e.g. v0.5.14
    directory: Path
    is_default: bool = False
    project: ProjectKind = DEFAULT_KIND  # what the line patches (every line under patches/ is sglang's)

    @property
    def release(self) -> str:
        return self.name.removeprefix(f"{self.project.name}/").removeprefix("v")

    @property
    def slug(self) -> str:
        return self.name.replace(".", "_").replace("/", "_")

    def pin(self) -> Pin:
        pin = load_pin(self.directory, self.project)
        if self.project.from_git and pin.tag != self.name:
            raise FatalError(f"{self.directory / PIN_FILE} pins {pin.tag}, but this line is {self.name}")
        if pin.tag != self.name:
            raise FatalError(
                f"{self.directory / PIN_FILE} pins {pin.tag}, but a line's folder is named after its pin's tag"
            )
        return pin

    @property
    def default_base(self) -> Path:
        build = project.PROJECT_ROOT / "build"
        name = self.project.name
        return (
            build / name
            if self.is_default
            else build / f"{name}-{self.release if self.project.from_git else self.name}"
        )

    @property
    def tests_dir(self) -> Path:
        tests = project.PROJECT_ROOT / "tests"
        return tests / "patched" if self.is_default else tests / f"patched_{self.slug}"

    @property
    def tree_env(self) -> str:
        """The variable that points this line's CPU tests at a tree (the `python/` folder of one)."""
        return TREE_ENV if self.is_default else f"{TREE_ENV}_{self.slug.upper()}"

    def upstreamed(self) -> list[dict]:
        """upstream.json: patches of an earlier line that upstream has on this one ({patch, upstream_pr, ...})."""
        path = self.directory / UPSTREAM_FILE
        if not path.is_file():
            return []
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(records, list) or not all(isinstance(r, dict) and "patch" in r for r in records):
                raise ValueError("expected a list of objects with a 'patch' field")
        except (ValueError, UnicodeDecodeError) as exc:
            raise FatalError(f"{path} is not a valid upstream list ({exc})") from None
        return records


def _version_of(name: str) -> Version | None:
    try:
        return Version(name.removeprefix("v"))
    except InvalidVersion:
        return None


def all_lines(root: Path | None = None) -> list[Line]:
    """Every line under patches/: sglang's, oldest release first (the first is the default line), then each
    git kind's, oldest pin first."""
    root = root or project.patches_root()
    return _sglang_lines(root) + [line for kind in KINDS if kind.from_git for line in _git_kind_lines(root, kind)]


def _git_kind_lines(root: Path, kind: ProjectKind) -> list[Line]:
    folder = root / kind.name
    found = [
        Line(f"{kind.name}/{sub.name}", sub, project=kind)
        for sub in (sorted(folder.iterdir()) if folder.is_dir() else [])
        if sub.is_dir() and (sub / SERIES_FILE).is_file() and (sub / PIN_FILE).is_file()
    ]
    return sorted(found, key=lambda line: (_pin_date(line), line.name))


def _pin_date(line: Line) -> str:
    try:
        return line.pin().date
    except FatalError:
        return ""


def _sglang_lines(root: Path) -> list[Line]:
    folders = [
        folder
        for folder in (root.iterdir() if root.is_dir() else [])
        if folder.is_dir()
        and (folder / SERIES_FILE).is_file()
        and (folder / PIN_FILE).is_file()
        and _version_of(folder.name) is not None
    ]
    folders.sort(key=lambda folder: _version_of(folder.name))
    return [Line(folder.name, folder, is_default=(n == 0)) for n, folder in enumerate(folders)]


def names(lines: list[Line]) -> str:
    return ", ".join(line.name for line in lines) or "none"


def default_line(root: Path | None = None) -> Line:
    return _some_lines(root)[0]


def default_patch_dir() -> Path:
    """The default line's folder: the oldest line, the one `make apply` with no argument uses."""
    return default_line().directory


def newest_line(root: Path | None = None) -> Line:
    return _some_lines(root)[-1]


def _some_lines(root: Path | None) -> list[Line]:
    lines = [line for line in all_lines(root) if line.project is DEFAULT_KIND]
    if not lines:
        where = root or project.patches_root()
        raise FatalError(f"{where} holds no series line (a folder like v0.5.14/ with series and pin.json)")
    return lines


def line_named(name: str, root: Path | None = None) -> Line:
    wanted = name if name.startswith("v") or "/" in name else f"v{name}"
    lines = all_lines(root)
    for line in lines:
        if line.name == wanted:
            return line
    raise FatalError(f"no series line {name!r}; the lines are: {names(lines)}")


def line_for_version(version: str, root: Path | None = None) -> Line | None:
    """The line for an sglang version: the same release (X.Y.Z), a `.postN` or `+local` suffix ignored.

    A pre-release or development version (`0.5.15rc1`, `0.5.15.dev3+g1234`) names a release not yet
    made, so it matches no line here: the caller places it by the checkout's release tag, or refuses.
    """
    parsed = _version_of(version)
    if parsed is None or parsed.is_prerelease:
        return None
    for line in _sglang_lines(root or project.patches_root()):
        if _version_of(line.name).release == parsed.release:
            return line
    return None


def line_for_target(where: Path, version: str | None, nearest_release_tag: Callable[[], str | None]) -> Line:
    """The line matching a target's sglang version (`version`: what the tree at `where` says it is); a
    development version in a checkout goes by its nearest release tag, asked for only then. Refuses,
    listing the lines, when none matches."""
    line = line_for_version(version) if version else None
    tag = None
    if line is None and (version is None or _is_development(version)):
        tag = nearest_release_tag()
        line = line_for_version(tag.removeprefix("v")) if tag else None
    if line is not None:
        return line
    name = DEFAULT_KIND.name  # the kind of every line under patches/
    said = f"{name} {version}" if version else f"an {name} that names no version"
    if tag:
        said += f" (nearest release tag {tag})"
    release = _version_of(tag or version or "")
    below = [line for line in all_lines() if release and _version_of(line.name) < release]
    forward = (
        f"; or carry the nearest line below it there: {hints.rebase_line(below[-1].name, str(release))} (on that "
        f"line's base, made by {hints.apply()}) writes the line v{release}"
        if below and not release.is_prerelease
        else ""
    )
    raise FatalError(
        f"{where} holds {said}, which matches no series line (lines: {names(all_lines())}); "
        f"pass {hints.option('--line LINE', 'LINE=<line>')} to apply one as it is{forward}"
    )


def line_for_blobs(kind: ProjectKind, blobs_of: Callable[[list[str]], dict[str, str]]) -> Line:
    """A git kind's line for a target: the newest whose pinned files the target holds (`blobs_of(paths)`), else
    the newest of the kind (apply then says how it differs from the pin). Refuses when the kind has none."""
    lines = [line for line in all_lines() if line.project is kind]
    if not lines:
        raise FatalError(f"{project.patches_root() / kind.name} holds no series line of {kind.name}")
    for line in reversed(lines):
        pin = line.pin()
        if blobs_of(list(pin.blobs)) == pin.blobs:
            return line
    return lines[-1]


def _is_development(version: str) -> bool:
    parsed = _version_of(version)
    return parsed is None or parsed.is_prerelease
