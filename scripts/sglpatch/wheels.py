"""sglang wheels from PyPI, downloaded once into a cache and verified by sha256.

The cache lives outside the repository's tracked files: $SGLPATCH_CACHE, else
$XDG_CACHE_HOME/sglpatch, else ~/.cache/sglpatch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.output import progress, show_path
from sglpatch.pin import Wheel


def cache_dir() -> Path:
    if os.environ.get("SGLPATCH_CACHE"):
        return Path(os.environ["SGLPATCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglpatch"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(release: str, wheel: Wheel | None = None) -> Path:
    """The cached wheel of `sglang==release`; downloads it on first use.

    With `wheel` (the pin's record), the exact file is fetched for its platform
    and checked against its sha256. Without it (other releases, for drift), the
    wheel for the pin's platform is fetched and its sha256 recorded beside it.
    """
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        cached = wheels / wheel.filename
        if cached.is_file() and file_sha256(cached) == wheel.sha256:
            return cached
    else:
        found = sorted(wheels.glob(f"sglang-{release}-*.whl"))
        if found:
            return found[0]
    return _download(release, wheel, wheels)


def _download(release: str, wheel: Wheel | None, wheels: Path) -> Path:
    python_version = wheel.python_version if wheel else "3.11"
    platform = wheel.platform if wheel else "manylinux_2_34_x86_64"
    progress(f"downloading sglang=={release} from PyPI (once; cached in {show_path(wheels)})")
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            "--platform",
            platform,
            "--dest",
            tmp,
            f"sglang=={release}",
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise FatalError(f"could not download sglang=={release} from PyPI: {last}")
        downloaded = sorted(Path(tmp).glob("sglang-*.whl"))
        if len(downloaded) != 1:
            raise FatalError(f"pip download of sglang=={release} gave {len(downloaded)} wheels, expected 1")
        got = downloaded[0]
        if wheel is not None:
            verify_wheel(got, wheel)
        final = wheels / got.name
        os.replace(got, final)
    return final


def verify_wheel(path: Path, wheel: Wheel) -> None:
    if path.name != wheel.filename:
        raise FatalError(f"downloaded {path.name}, but the pin names {wheel.filename}")
    digest = file_sha256(path)
    if digest != wheel.sha256:
        raise FatalError(f"checksum mismatch for {path.name}: pin says {wheel.sha256[:12]}…, file is {digest[:12]}…")


def extract_package(wheel_path: Path, dest: Path) -> int:
    """Lay the wheel's `sglang/` folder out at `dest` (upstream's python/sglang). Returns the file count."""
    count = 0
    try:
        with zipfile.ZipFile(wheel_path) as archive:
            for info in archive.infolist():
                name = info.filename
                if info.is_dir() or not name.startswith("sglang/"):
                    continue
                parts = name.split("/")
                if any(p in ("", ".", "..") for p in parts[1:]):
                    raise FatalError(f"{wheel_path.name}: unsafe member name {name!r}")
                target = dest.joinpath(*parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                count += 1
    except zipfile.BadZipFile:
        raise FatalError(f"{wheel_path}: not a valid wheel (bad zip)") from None
    if count == 0:
        raise FatalError(f"{wheel_path.name}: holds no sglang/ package")
    return count
