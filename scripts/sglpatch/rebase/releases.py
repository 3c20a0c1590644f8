"""sglang releases (a project kind's: `project_kind.py`) as git commits, made from their PyPI wheels.

A cached bare repo ($SGLPATCH_CACHE/releases.git) holds one parentless commit
per release, tagged v<release>, with the wheel's `sglang/` at python/sglang/
(the same tree `make apply` builds, so blob ids agree with the pin). Commits
are streamed in with `git fast-import`, once per release.

Such a commit is not sgl-project/sglang's history: a branch built on it cannot be sent
upstream. Its message ends with the trailer `Sglpatch-Import: pypi-wheel` (IMPORT_TRAILER),
which `imported_release` looks for in a base's history; imports made before that trailer
existed are known by their fixed identity and subject (`sglang v<release> from PyPI`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglpatch.errors import FatalError
from sglpatch.git import SGLPATCH_IDENTITY, Git, init_repo, own_repo
from sglpatch.output import progress, show_path
from sglpatch.project_kind import DEFAULT_KIND, ProjectKind
from sglpatch.wheels import cache_folder, fetch_wheel, pypi_upload_day


def import_identity(project: ProjectKind = DEFAULT_KIND) -> dict[str, str]:
    """Who made a release's import commit: fixed, so that every machine makes the same commit id."""
    return {"name": f"{project.name} release (PyPI wheel)", "email": SGLPATCH_IDENTITY[1]}


BASE_IDENTITY = import_identity()
IMPORT_TRAILER = "Sglpatch-Import"
_IMPORT_SUBJECT = re.compile(r"^sglang (v\S+) from PyPI$")
_RELEASE_TAG = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)$")


def release_of(ref: str) -> str | None:
    """'v0.5.15' or '0.5.15' -> '0.5.15'; None for anything else."""
    match = _RELEASE_TAG.match(ref)
    return match.group(1) if match else None


def releases_repo() -> Git:
    path = cache_folder("releases.git")
    if not (path / "HEAD").exists():
        init_repo(path, bare=True)
    return own_repo(path)


def release_commit(
    release: str,
    repo: Git | None = None,
    wheel_path: Path | None = None,
    *,
    date: str | None = None,
    parent: str | None = None,
    project: ProjectKind = DEFAULT_KIND,
) -> str:
    """Commit id of `release` (tag v<release>) in `repo` (the cached releases repo by default), made on first
    use from its wheel: parentless unless `parent` is given, dated `date` (YYYY-MM-DD, default: the wheel's)."""
    repo = repo or releases_repo()
    tag = f"v{release}"
    existing = repo.rev_parse(f"refs/tags/{tag}")
    if existing:
        return existing
    wheel_path = wheel_path or fetch_wheel(release, project=project)
    progress(f"importing {project.name} {release} into {show_path(repo.workdir)}")
    with tempfile.TemporaryFile() as stream:
        _write_fast_import(stream, wheel_path, tag, date, parent, project)
        stream.seek(0)
        fast_import(repo, stream)
    return repo.run("rev-parse", f"refs/tags/{tag}^{{commit}}")


def fast_import(repo: Git, stream) -> None:
    """Stream a wheel's commit into `repo`. Its 3,200 files go in undeltified (a wheel's files are new paths:
    deltas spared 1 MB of 13 in sglang 0.5.14's) and zlib level 1, which takes it from 1.6 s to 0.6 s; the
    object ids are the same, and any later repack still deltifies and compresses as the repo is set to."""
    repo.run("-c", "pack.compression=1", "fast-import", "--quiet", "--done", "--depth=0", stdin=stream)


def check_out_release(
    repo: Git, release: str, wheel_path: Path, date: str | None = None, project: ProjectKind = DEFAULT_KIND
) -> str:
    """`release` committed on top of `repo`'s HEAD (the first commit in a new repo) and checked out there."""
    commit = release_commit(release, repo, wheel_path, date=date, parent=repo.rev_parse("HEAD"), project=project)
    repo.run("reset", "-q", "--hard", commit)
    return commit


def imported_release(git: Git, rev: str) -> str | None:
    """The sglang release (e.g. 'v0.5.23') whose wheel import is `rev` or in its history, or None when that
    history holds no import: a base made from a wheel shares no commit with upstream's repository."""
    log = git.run(
        "log",
        "--format=%an <%ae>%x1f%s%x1f%(trailers:key=" + IMPORT_TRAILER + ",valueonly)%x1e",
        "-E",
        f"--grep=^{IMPORT_TRAILER}: ",
        "--grep=^sglang v[^ ]+ from PyPI$",
        rev,
        "--",
    )
    ours = f"{BASE_IDENTITY['name']} <{BASE_IDENTITY['email']}>"
    for record in filter(None, (r.strip("\n") for r in log.split("\x1e"))):
        ident, subject, trailer = record.split("\x1f")
        match = _IMPORT_SUBJECT.match(subject)
        if trailer.strip() or (ident == ours and match):  # the marker, or an import made before it existed
            return match.group(1) if match else subject
    return None


def _write_fast_import(
    stream, wheel_path: Path, tag: str, day: str | None, parent: str | None, project: ProjectKind
) -> None:
    message = f"{project.name} {tag} from PyPI\n\nWheel: {wheel_path.name}\n{IMPORT_TRAILER}: pypi-wheel\n"
    write_wheel_commit(stream, wheel_path, f"refs/tags/{tag}", message, project, day=day, parent=parent)


def write_wheel_commit(
    stream,
    wheel_path: Path,
    ref: str,
    message: str,
    project: ProjectKind,
    *,
    day: str | None = None,
    parent: str | None = None,
    skip: tuple[str, ...] = (),
) -> None:
    """A `git fast-import` stream of one commit at `ref`: the wheel's package folder at the kind's
    package_prefix (its members under `skip`, package-relative prefixes, left out), with the kind's fixed
    import identity, so every machine makes the same commit id."""
    try:
        archive = zipfile.ZipFile(wheel_path)
    except zipfile.BadZipFile:
        raise FatalError(f"{wheel_path}: not a valid wheel (bad zip)") from None
    with archive:
        # the import commit's own timestamp: the release day where the wheel says it, else the epoch (it is
        # never written as the release's date: that is release_date's job)
        stamp = _epoch(day or _release_day(archive) or "1970-01-01")
        identity = import_identity(project)
        ident = f"{identity['name']} <{identity['email']}> {stamp} +0000"
        data = message.encode()
        stream.write(f"commit {ref}\nauthor {ident}\ncommitter {ident}\n".encode())
        stream.write(b"data %d\n%s\n" % (len(data), data))
        if parent:
            stream.write(f"from {parent}\n".encode())
        stream.write(b"deleteall\n")
        folder = project.package + "/"  # the package's folder in the wheel, at package_prefix in the commit
        for info in _package_members(archive, wheel_path, folder):
            relative = info.filename[len(folder) :]
            if relative.startswith(skip):
                continue
            data = archive.read(info)
            path = project.package_prefix + relative
            stream.write(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data))
        stream.write(b"\ndone\n")


def _package_members(archive: zipfile.ZipFile, wheel_path: Path, folder: str) -> list[zipfile.ZipInfo]:
    members = [i for i in archive.infolist() if not i.is_dir() and i.filename.startswith(folder)]
    for info in members:
        if any(p in ("", ".", "..") for p in info.filename.split("/")[1:]):
            raise FatalError(f"{wheel_path.name}: unsafe member name {info.filename!r}")
    if not members:
        raise FatalError(f"{wheel_path.name}: holds no {folder} package")
    return members


def _release_day(archive: zipfile.ZipFile) -> str | None:
    """The release day (YYYY-MM-DD) from setuptools-scm's record in the wheel; None when it has none."""
    for name in archive.namelist():
        if name.endswith(".dist-info/scm_version.json"):
            day = json.loads(archive.read(name)).get("node_date")
            if isinstance(day, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
                return day
    return None


def _epoch(day: str) -> int:
    return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp())


def release_date(wheel_path: Path, release: str, project: ProjectKind = DEFAULT_KIND) -> str:
    """The day `release` was made (YYYY-MM-DD), for pin.json: setuptools-scm's record in the wheel, else the
    day PyPI received the wheel. Never a made-up date: when neither can be had (offline), FatalError."""
    with zipfile.ZipFile(wheel_path) as archive:
        day = _release_day(archive)
    return day or pypi_upload_day(release, wheel_path.name, project)


def published_releases(since: str, project: ProjectKind = DEFAULT_KIND) -> list[str]:
    """The project's releases on PyPI from `since` on, oldest first (final releases and .postN)."""
    listing = ["pip", "index", "versions", project.wheel]
    result = subprocess.run([sys.executable, "-m", *listing], capture_output=True, text=True, check=False)
    line = next((x for x in result.stdout.splitlines() if x.startswith("Available versions:")), None)
    if result.returncode != 0 or line is None:
        raise FatalError(f"could not list {project.name} releases on PyPI ({' '.join(listing)} failed)")
    floor = Version(since)
    versions = []
    for raw in line.split(":", 1)[1].split(","):
        try:
            version = Version(raw.strip())
        except InvalidVersion:
            continue
        if version >= floor and not version.is_prerelease and not version.is_devrelease:
            versions.append(version)
    return [str(v) for v in sorted(versions)]
