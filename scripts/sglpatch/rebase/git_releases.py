"""Releases of a git kind (DeepGEMM, `ProjectKind.from_git`): commits of its own repository, from a clone.

A DeepGEMM "release" is a commit (the pin names one), so where sglang's code makes a release commit from
a PyPI wheel (releases.py) this kind takes commits from a clone. The source is $SGLPATCH_<KIND>_SOURCE:
a folder holding a git repository (a clone or a mirror on this machine, read where it is, never written),
or a URL, fetched into a cached bare clone ($SGLPATCH_CACHE/sources/<kind>-<hash of the URL>.git); default
https://github.com/<upstream>.

Where the source cannot be reached (CI reaches PyPI only), the default base is a **stand-in**: one commit
holding the package folder of the pin's stand-in wheel (sgl-deep-gemm, sha256-checked) at the checkout's
paths, without what a checkout does not track there (the cute/cutlass submodule's headers, the built
extension). It is not deepseek-ai/DeepGEMM's commit: its message says so (STAND_IN_TRAILER), every
command that builds on it says so in one line, and it holds no csrc/, setup.py or tests/, so a patch's
parts there cannot be checked on it. `SGLPATCH_<KIND>_SOURCE=stand-in` asks for it without trying the
source.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.git import Git, git_reason, init_repo, own_repo
from sglpatch.output import progress, say, show_path, timed
from sglpatch.pin import Pin, drifted_files
from sglpatch.project_kind import ProjectKind
from sglpatch.rebase.releases import IMPORT_TRAILER, fast_import, write_wheel_commit
from sglpatch.wheels import cache_dir, fetch_wheel

STAND_IN = "stand-in"
STAND_IN_TRAILER = "Sglpatch-Stand-In"
# what a checkout does not track in the package folder, though the wheel ships it there
_NOT_IN_A_CHECKOUT = ("include/cute/", "include/cutlass/", "_C.so", "_C.pyi", "envs.py")


def source_variable(kind: ProjectKind) -> str:
    return f"SGLPATCH_{kind.name.upper()}_SOURCE"


def source_of(kind: ProjectKind) -> str:
    return os.environ.get(source_variable(kind)) or kind.upstream_url


def source_clone(kind: ProjectKind, url: str) -> Git:
    """The cached bare clone of `url` (one per URL: two sources never mix their branches)."""
    path = cache_dir() / "sources" / f"{kind.name}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.git"
    if not (path / "HEAD").exists():
        init_repo(path, bare=True)
    return own_repo(path)


def fetch_source(kind: ProjectKind, wanted: str | None = None, refresh: bool = False) -> tuple[Git | None, str]:
    """The source's repository (a local one as it is; a URL's cached clone, fetched when `wanted` is missing or
    with `refresh`), holding `wanted`; or None and why it could not be had."""
    source = source_of(kind)
    if source == STAND_IN:
        return None, f"{source_variable(kind)}={STAND_IN}"
    local = Path(source).expanduser()
    if local.is_dir():
        git = Git(local)
        if git.try_run("rev-parse", "--git-dir")[0] != 0:
            return None, f"{source} is not a git repository"
        if wanted is not None and not has_commit(git, wanted):
            return None, f"{source} has no commit {wanted}"
        return git, ""
    clone = source_clone(kind, source)
    if not refresh and (wanted is None or has_commit(clone, wanted)):
        if wanted is not None or clone.rev_parse("HEAD"):
            return clone, ""
    progress(f"fetching {kind.name} from {source} into {show_path(clone.workdir)}")
    status, _, err = clone.try_run("fetch", "--quiet", "--prune", source, "+refs/heads/*:refs/heads/*")
    if status != 0:
        return None, f"could not fetch {source} ({git_reason(err)})"
    if wanted is not None and not has_commit(clone, wanted):
        return None, f"{source} has no commit {wanted}"
    return clone, ""


def has_commit(git: Git, commit: str) -> bool:
    return git.rev_parse(f"{commit}^{{commit}}") is not None


def stand_in_of(git: Git, rev: str) -> str | None:
    """What the stand-in at `rev` stands in for (its trailer), or None when `rev` is a real commit."""
    status, value, _ = git.try_run("log", "-1", f"--format=%(trailers:key={STAND_IN_TRAILER},valueonly)", rev, "--")
    return (value.strip() or None) if status == 0 else None


def build_git_base(pin: Pin, dest: Path) -> Path:
    """A git kind's default base, where none is: the pinned commit from the source (or the stand-in), tagged with
    the line's name, built beside `dest` and renamed into place."""
    kind = pin.project
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    clone, why = fetch_source(kind, pin.commit)
    with timed(f"laid out {pin.describe()} at {dest}"):
        repo = init_repo(partial)
        if clone is not None:
            repo.run("fetch", "--quiet", "--no-tags", str(clone.workdir), "+refs/heads/*:refs/remotes/source/*")
            repo.run("reset", "-q", "--hard", pin.commit)
            drift = drifted_files(pin, _blobs(repo, list(pin.blobs)))
        else:
            say(f"note: {why}: {pin.describe()} is laid out from a stand-in, {stand_in_description(pin)}")
            say(f"note: {replace_stand_in(pin, dest)}")
            lay_out_stand_in(repo, pin)
            drift = [p for p in drifted_files(pin, _blobs(repo, list(pin.blobs))) if in_stand_in(pin, p)]
        if drift:
            raise FatalError(f"{kind.name} at {pin.release} does not match pin.json in: {', '.join(drift)}")
        repo.run("tag", pin.tag, "HEAD")
        partial.rename(dest)
    return dest


def stand_in_description(pin: Pin) -> str:
    return (
        f"the package folder of {pin.wheel.filename.split('-py3')[0]} from PyPI at the checkout's paths "
        f"(not {pin.project.upstream} {pin.release}: no csrc/, setup.py or tests/)"
    )


def replace_stand_in(pin: Pin, dest: Path) -> str:
    """How the stand-in at `dest` gives way to the real commit: it stays (a later apply reuses it, reachable
    source or not) until it is moved aside, and never is by sglpatch: it may hold the user's commits."""
    return (
        f"to lay out {pin.project.upstream} {pin.release} in its place, with the source reachable "
        f"({source_variable(pin.project)}: a clone or URL), move it aside ({hints.move_aside(dest)}) and apply again"
    )


def in_stand_in(pin: Pin, path: str) -> bool:
    """Whether the stand-in can hold `path`: the package's files only."""
    return path.startswith(pin.project.package_prefix)


def lay_out_stand_in(repo: Git, pin: Pin) -> str:
    """The stand-in commit made in `repo` and checked out there (HEAD); its id."""
    commit = _stand_in_commit(repo, pin)
    repo.run("reset", "-q", "--hard", commit)
    return commit


def _stand_in_commit(repo: Git, pin: Pin) -> str:
    wheel = fetch_wheel(pin.wheel.filename.split("-")[1], pin.wheel, pin.project)
    message = (
        f"{pin.project.name} stand-in for {pin.project.upstream} {pin.release}\n\n"
        f"The package folder of {wheel.name} (PyPI) at the checkout's paths; not the upstream commit.\n\n"
        f"{STAND_IN_TRAILER}: {stand_in_description(pin)}\n{IMPORT_TRAILER}: pypi-wheel\n"
    )
    ref = "refs/sglpatch/stand-in"
    with tempfile.TemporaryFile() as stream:
        write_wheel_commit(stream, wheel, ref, message, pin.project, day=pin.date, skip=_NOT_IN_A_CHECKOUT)
        stream.seek(0)
        fast_import(repo, stream)
    commit = repo.run("rev-parse", ref)
    repo.run("update-ref", "-d", ref)
    return commit


def _blobs(repo: Git, paths: list[str]) -> dict[str, str]:
    listed = repo.run("ls-tree", "-r", "HEAD", "--", *paths)
    return {line.split("\t", 1)[1]: line.split()[2] for line in listed.splitlines()}


def source_refs(pin: Pin) -> tuple[Git, list[str]]:
    """The source's branches (fetched now), for drift: the clone, holding the pinned commit, and their names."""
    kind = pin.project
    clone, why = fetch_source(kind, pin.commit, refresh=True)
    if clone is None:
        raise FatalError(f"drift of {pin.describe()} needs its source: {why} (set {source_variable(kind)})")
    return clone, clone.run("for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
