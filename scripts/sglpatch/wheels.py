"""sglang wheels (a project kind's: `project_kind.py`) from PyPI, downloaded once into a cache and verified
by sha256.

The cache lives outside the repository's tracked files: $SGLPATCH_CACHE, else
$XDG_CACHE_HOME/sglpatch, else ~/.cache/sglpatch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from sglpatch.errors import FatalError, os_reason
from sglpatch.output import progress, show_path
from sglpatch.pin import Wheel
from sglpatch.project_kind import DEFAULT_KIND, ProjectKind

_DOWNLOADED: list[str] = []  # the wheels this process downloaded, in order (drift reports how many)


def downloaded_wheels() -> list[str]:
    """The names of the wheels this process downloaded from PyPI so far (a re-download of a bad cached copy
    counts, though the cache's listing does not change)."""
    return list(_DOWNLOADED)


def cache_dir() -> Path:
    if os.environ.get("SGLPATCH_CACHE"):
        return Path(os.environ["SGLPATCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglpatch"


def cache_folder(name: str) -> Path:
    """The cache's sub-folder `name` (wheels, locks), made when missing; one sglpatch cannot write is refused in
    one line that names SGLPATCH_CACHE."""
    folder = cache_dir() / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable_cache(folder, exc) from None
    return folder


def unwritable_cache(path: Path, exc: OSError) -> FatalError:
    return FatalError(
        f"cannot write sglpatch's cache at {show_path(path)} ({os_reason(exc)}); nothing was changed: "
        "set SGLPATCH_CACHE to a folder you can write (it keeps the wheels, the locks and the releases)"
    )


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(release: str, wheel: Wheel | None = None, project: ProjectKind = DEFAULT_KIND) -> Path:
    """The cached wheel of `sglang==release`; downloads it on first use.

    With `wheel` (the pin's record), the exact file is fetched for its platform
    and checked against its sha256. Without it (other releases, for drift), the
    wheel for the pin's platform is fetched and its sha256 recorded beside it.
    """
    wheels = cache_folder("wheels")
    if wheel is not None:
        cached = wheels / wheel.filename
        if cached.is_file() and file_sha256(cached) == wheel.sha256:
            return cached
    else:
        found = sorted(wheels.glob(f"{project.wheel_stem}-{release}-*.whl"))
        if found:
            return found[0]
    return _download(release, wheel, wheels, project)


def _download(release: str, wheel: Wheel | None, wheels: Path, project: ProjectKind) -> Path:
    python_version = wheel.python_version if wheel else "3.11"
    platform = wheel.platform if wheel else "manylinux_2_34_x86_64"
    wanted = f"{project.wheel}=={release}"
    progress(f"downloading {wanted} from PyPI (once; cached in {show_path(wheels)})")
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as tmp:
        pip_download([wanted], Path(tmp), python_version, [platform], what=wanted)
        downloaded = sorted(Path(tmp).glob(f"{project.wheel_stem}-*.whl"))
        if len(downloaded) != 1:
            raise FatalError(f"pip download of {wanted} gave {len(downloaded)} wheels, expected 1")
        got = downloaded[0]
        if wheel is not None:
            verify_wheel(got, wheel)
        final = wheels / got.name
        os.replace(got, final)
    _DOWNLOADED.append(final.name)
    return final


def verify_wheel(path: Path, wheel: Wheel) -> None:
    if path.name != wheel.filename:
        raise FatalError(f"downloaded {path.name}, but the pin names {wheel.filename}")
    digest = file_sha256(path)
    if digest != wheel.sha256:
        raise FatalError(f"checksum mismatch for {path.name}: pin says {wheel.sha256[:12]}…, file is {digest[:12]}…")


PYPI_JSON = "https://pypi.org/pypi"


def pypi_upload_day(release: str, filename: str, project: ProjectKind = DEFAULT_KIND) -> str:
    """The day (YYYY-MM-DD, UTC) PyPI received the wheel `filename` of `project`'s `release` (the release's
    earliest file when PyPI lists no such name), from PyPI's JSON API; FatalError when PyPI cannot say."""
    files, why = _pypi_files(release, f"{PYPI_JSON}/{project.wheel}")
    days = {f.get("filename"): str(f.get("upload_time", ""))[:10] for f in files if isinstance(f, dict)}
    day = days.get(filename) or min((d for d in days.values() if d), default=None)
    if day is None or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
        raise FatalError(
            f"the wheel of {project.name} {release} does not say when it was released, and PyPI could not either "
            f"({why or 'no upload time listed'}); pin.json needs that date: retry where PyPI is reachable"
        )
    return day


def _pypi_files(release: str, project_url: str) -> tuple[list, str]:
    """The release's files as PyPI's JSON API lists them (its version page, else the project page), and why
    neither answered when the list is empty."""
    why = ""
    for url, pick in (
        (f"{project_url}/{release}/json", lambda data: data.get("urls")),
        (f"{project_url}/json", lambda data: data.get("releases", {}).get(release)),
    ):
        try:
            files = pick(pypi_json(url))
        except (OSError, ValueError, AttributeError) as exc:
            why = f"{url}: {exc}"
            continue
        if isinstance(files, list) and files:
            return files, ""
    return [], why


def pypi_json(url: str) -> dict:
    """One GET of PyPI's JSON API (the only place the toolkit asks PyPI something other than pip does)."""
    import urllib.request  # here, not at the top: it slows every CLI start, and most runs never ask PyPI

    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - a fixed https URL
        return json.load(response)


def pip_download(
    requirements: list[str], dest: Path, python_version: str, platforms: list[str], what: str | None = None
) -> None:
    """`pip download` of binary wheels, without dependencies, for another interpreter and platform: the one
    place either the toolkit or the GPU bundle asks PyPI for a file. `requirements` are pip arguments
    (`name==version`, or `--require-hashes -r FILE`, where pip itself refuses a wheel whose hash differs)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python_version, "--implementation", "cp"]
    for platform in platforms:
        command += ["--platform", platform]
    result = subprocess.run([*command, "--dest", str(dest), *requirements], capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise FatalError(f"could not download {what or ' '.join(requirements)} from PyPI: {last}")
