"""The embedded default base: the pinned wheel laid out as an upstream-style git repo.

`build/sglang` gets the pinned release's commit, made by `releases.check_out_release`
(the one builder of release commits: `python/sglang/` from the wheel, a fixed
identity and the release date, so every machine makes the same commit id), and
the release tag. It is built beside its final place and renamed into it, so an
interrupted build never leaves a half-made base.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.git import Git, init_repo
from sglpatch.output import say, timed
from sglpatch.pin import Pin, drifted_files
from sglpatch.rebase.git_releases import build_git_base, replace_stand_in, stand_in_description, stand_in_of
from sglpatch.rebase.releases import check_out_release
from sglpatch.wheels import fetch_wheel


def ensure_default_base(pin: Pin, dest: Path) -> Path:
    """The line's default base at `dest`: there already (a git repo with the pin's tag), or built from the pin."""
    if (dest / ".git").exists():
        there = Git(dest)
        if there.rev_parse(pin.tag) is None:
            raise FatalError(f"{dest} exists but has no tag {pin.tag}; {_made_elsewhere(dest)}")
        if pin.project.from_git and stand_in_of(there, pin.tag):
            say(f"note: {dest} holds a stand-in for {pin.describe()}, {stand_in_description(pin)}")
            say(f"note: {replace_stand_in(pin, dest)}")
        return dest
    if dest.exists():
        raise FatalError(f"{dest} exists but is not a git repo; {_made_elsewhere(dest)}")
    if pin.project.from_git:  # DeepGEMM: the pinned commit from a clone (or its stand-in)
        return build_git_base(pin, dest)
    wheel_path = fetch_wheel(pin.release, pin.wheel, pin.project)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with timed(f"laid out {pin.project.name} {pin.release} at {dest}"):
        repo = init_repo(partial)
        check_out_release(repo, pin.release, wheel_path, date=pin.date, project=pin.project)
        _check_against_pin(repo, pin)
        partial.rename(dest)
    return dest


def _made_elsewhere(dest: Path) -> str:
    """What to do about a folder in the base's place that sglpatch did not make: keep it, out of the way."""
    return f"nothing was changed: move it aside ({hints.move_aside(dest)}), then {hints.apply()} builds the base"


def _check_against_pin(repo: Git, pin: Pin) -> None:
    drift = drift_from_pin(repo, "HEAD", pin)
    if drift:
        raise FatalError(f"the {pin.wheel.filename} wheel does not match pin.json in: {', '.join(drift)}")


def drift_from_pin(repo: Git, rev: str, pin: Pin) -> list[str]:
    """The files the pin records whose content at `rev` differs from it."""
    listed = repo.run("ls-tree", "-r", rev, "--", *pin.blobs)
    blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listed.splitlines()}
    return drifted_files(pin, blobs)
