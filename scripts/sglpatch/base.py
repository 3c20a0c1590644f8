"""The embedded default base: the pinned wheel laid out as an upstream-style git repo.

`build/sglang` gets `python/sglang/` from the wheel, one commit with a fixed
identity and the release date (so every machine makes the same commit id), and
the release tag. It is built beside its final place and renamed into it, so an
interrupted build never leaves a half-made base.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.git import Git, init_repo
from sglpatch.output import timed
from sglpatch.pin import Pin, drifted_files
from sglpatch.series import PACKAGE_PREFIX
from sglpatch.wheels import extract_package, fetch_wheel

BASE_IDENTITY = {"name": "sglang release (PyPI wheel)", "email": "sglpatch@localhost"}


def release_commit_env(date: str) -> dict[str, str]:
    stamp = f"{date}T00:00:00+00:00"
    return {
        "GIT_AUTHOR_NAME": BASE_IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": BASE_IDENTITY["email"],
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_NAME": BASE_IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": BASE_IDENTITY["email"],
        "GIT_COMMITTER_DATE": stamp,
    }


def commit_release(repo: Git, wheel_path: Path, release: str, tag: str, date: str, replace: bool = False) -> str:
    """Lay a wheel's package out as python/sglang/ in `repo` and commit it as one release."""
    package = repo.workdir / PACKAGE_PREFIX.rstrip("/")
    if replace and package.exists():
        shutil.rmtree(package)
    count = extract_package(wheel_path, package)
    repo.run("add", "-A", "--", PACKAGE_PREFIX)
    message = f"sglang {tag} from PyPI\n\nWheel: {wheel_path.name}\nFiles: {count}\n"
    repo.with_env(**release_commit_env(date)).run_with_input(
        ["commit", "-q", "--allow-empty", "-F", "-"], message.encode()
    )
    repo.run("tag", tag)
    return repo.run("rev-parse", "HEAD")


def ensure_default_base(pin: Pin, dest: Path) -> Path:
    if (dest / ".git").exists():
        if Git(dest).rev_parse(pin.tag) is None:
            raise FatalError(f"{dest} exists but has no tag {pin.tag}; delete it and run {hints.APPLY} again")
        return dest
    if dest.exists():
        raise FatalError(f"{dest} exists but is not a git repo; delete it and run {hints.APPLY} again")
    wheel_path = fetch_wheel(pin.release, pin.wheel)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with timed(f"laid out sglang {pin.release} at {dest}"):
        repo = init_repo(partial)
        commit_release(repo, wheel_path, pin.release, pin.tag, pin.date)
        _check_against_pin(repo, pin)
        partial.rename(dest)
    return dest


def _check_against_pin(repo: Git, pin: Pin) -> None:
    listed = repo.run("ls-tree", "-r", "HEAD", "--", *pin.blobs)
    blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listed.splitlines()}
    drift = drifted_files(pin, blobs)
    if drift:
        raise FatalError(f"the {pin.wheel.filename} wheel does not match pin.json in: {', '.join(drift)}")
