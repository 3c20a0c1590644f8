"""Where the series goes: a git checkout of a project with a pin (sglang: `project_kind.py`), or a plain
package folder of it.

Patches always speak upstream's layout (`python/sglang/...`, the kind's `package_prefix`). A git
checkout has that layout; a package folder (`site-packages/sglang`, or any folder with `__init__.py`
and `srt/`, the kind's `marker`) holds what is under `python/sglang/`, so paths are mapped by
dropping that prefix.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.git import Git, blob_id, git_reason
from sglpatch.output import say
from sglpatch.project_kind import DEFAULT_KIND, ProjectKind
from sglpatch.safety.interrupts import guarded
from sglpatch.safety.run_mark import RunMark
from sglpatch.wheels import cache_folder, unwritable_cache

GIT_CHECKOUT = "git checkout"
_VERSION_LITERAL = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.MULTILINE)
PACKAGE_FOLDER = "package folder"
JOURNAL_DIR = ".sglpatch"  # where a package folder's journal lives (journal.py)


@dataclass
class Target:
    kind: str
    root: Path  # the repo root for a checkout, the package folder otherwise
    project: ProjectKind = DEFAULT_KIND

    @property
    def is_git(self) -> bool:
        return self.kind == GIT_CHECKOUT

    @cached_property
    def git(self) -> Git:
        """git in the checkout, one for this Target (made for one command): it asks for the git dir once."""
        return Git(self.root, one_repo=True)

    def local_path(self, upstream_path: str) -> Path:
        if self.is_git:
            return self.root / upstream_path
        prefix = self.project.package_prefix
        if not upstream_path.startswith(prefix):  # the project's test tree: a checkout's only
            raise FatalError(f"{upstream_path} has no place in the package folder {self.root}")
        return self.root / upstream_path[len(prefix) :]

    def paths_or_package(self, paths: list[str]) -> list[str]:
        """`paths` (what a record says a series touched), or the whole package when it names none."""
        return paths or [self.project.checkout_folder]

    def read_files(self, paths: list[str]) -> dict[str, bytes | None]:
        """Current bytes of each path (None when absent), refusing links that leave the target."""
        files = {}
        for path in paths:
            local = self.local_path(path)
            self.check_inside(local)
            files[path] = local.read_bytes() if local.is_file() else None
        return files

    def executables(self, paths: list[str]) -> set[str]:
        """The paths whose file is executable (git's mode 100755: any x bit set)."""
        return {p for p in paths if self.local_path(p).is_file() and os.stat(self.local_path(p)).st_mode & 0o111}

    def current_blobs(self, paths: list[str]) -> dict[str, str]:
        return {p: blob_id(data) if data is not None else "" for p, data in self.read_files(paths).items()}

    def check_inside(self, local: Path) -> None:
        resolved = local.resolve()
        if resolved != self.root.resolve() and self.root.resolve() not in resolved.parents:
            raise FatalError(f"{local} resolves to {resolved}, outside the target: refusing to follow the link")
        if local.is_symlink():
            raise FatalError(f"{local} is a symbolic link: refusing to patch through it")

    def describe(self) -> str:
        return f"{self.root} ({self.kind})"

    def version(self) -> str | None:
        """The version the tree says it is, read without importing it (None when it does not say).

        `version.py` or the generated `_version.py` (the kind's `version_files`) when either holds a
        literal `__version__`; else, for a package folder, the `sglang-*.dist-info` beside it.
        """
        package = self.local_path(self.project.package_prefix + "__init__.py").parent
        for name in self.project.version_files:
            path = package / name
            if path.is_file() and (match := _VERSION_LITERAL.search(path.read_text(errors="replace"))):
                return match.group(1)
        if not self.is_git:
            for metadata in sorted(package.parent.glob(f"{self.project.wheel_stem}-*.dist-info/METADATA")):
                if match := re.search(r"^Version: (\S+)$", metadata.read_text(errors="replace"), re.MULTILINE):
                    return match.group(1)
        return None

    def nearest_release_tag(self) -> str | None:
        """A checkout's nearest `vX.Y.Z` tag at or below HEAD (what a development version grew from)."""
        if not self.is_git:
            return None
        status, tag, _ = self.git.try_run("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "HEAD")
        return tag if status == 0 and tag else None


def dirty_paths(target: Target, paths: list[str]) -> list[str]:
    # --no-optional-locks: a check writes nothing (git status would refresh the index, and on a full disk fail)
    listed = target.git.entries(
        "--no-optional-locks", "status", "--porcelain", "-z", "--no-renames", "--untracked-files=all", "--", *paths
    )
    return sorted({entry[3:] for entry in listed if len(entry) > 3})


def branch_refusal(target: Target, branch: str, option: str) -> str | None:
    """Why the series branch `branch` cannot be made here (one line, `option` the way to name another), or None:
    a branch of that name (the user's, or one a linked worktree holds), or one whose name git cannot put beside
    it (`sglpatch` blocks `sglpatch/v0.5.14`, and `sglpatch/v0.5.14/x` blocks it too)."""
    git = target.git
    if git.try_run("check-ref-format", "--branch", branch)[0] != 0:
        return f"{branch!r} is not a valid branch name; pass {option}"
    parts = branch.split("/")
    above = ["refs/heads/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    listed = git.run("for-each-ref", "--format=%(refname)", *above, f"refs/heads/{branch}/").split()
    # for-each-ref takes `refs/heads/sglpatch` for everything under it too: `sglpatch/v0.5.14` blocks no
    # `sglpatch/other` (a second worktree's series)
    listed = [ref for ref in listed if ref in above or ref.startswith(f"refs/heads/{branch}/")]
    if not listed:
        return None
    found = listed[0].removeprefix("refs/heads/")
    why = "already exists" if found == branch else f"cannot be made beside your branch {found}"
    return f"branch {branch} {why}; nothing was changed: pass {option} for the series branch"


def checkout_at(root: Path) -> Target:
    """The git checkout at `root`, whatever it holds: for a command that looks at a checkout, not one that
    patches it (open_target checks that it is one to patch)."""
    return Target(GIT_CHECKOUT, root.resolve())


def open_target(path: str | Path, project: ProjectKind = DEFAULT_KIND) -> Target:
    given = Path(path).expanduser()
    if not given.exists():
        raise FatalError(f"target {given} does not exist")
    if not given.is_dir():
        raise FatalError(f"target {given} is not a folder")
    root = given.resolve()
    if (root / project.package_prefix / "__init__.py").is_file():
        if (root / ".git").exists():
            status, top, err = Git(root).try_path("rev-parse", "--show-toplevel")
            if top is None:
                raise FatalError(_unusable_checkout(root, err))
            if top.resolve() == root:
                _refuse_unborn(root)
                return Target(GIT_CHECKOUT, root, project)
        return _found_inside(root, root / project.checkout_folder, project)
    if project.is_package(root / project.package):
        _refuse_tracked_package(root / project.package)
        return _found_inside(root, root / project.package, project)
    if project.is_package(root):
        _refuse_tracked_package(root)
        return Target(PACKAGE_FOLDER, root, project)
    raise FatalError(
        f"{given} is not {project.name}: expected a checkout with {project.package_prefix} or a package folder "
        f"with __init__.py and {project.marker}/"
    )


def _refuse_unborn(root: Path) -> None:
    """A checkout whose branch has no commit (`git checkout --orphan`, a repository never committed to) has no
    base to patch or step back to."""
    git = Git(root)
    if git.rev_parse("HEAD") is None:
        branch = git.current_branch() or "HEAD"
        raise FatalError(
            f"{root} is on branch {branch}, which has no commit yet (an orphan branch, or a repository never "
            "committed to); nothing was changed: switch to a branch that holds the sglang sources first"
        )


def _refuse_tracked_package(package: Path) -> None:
    """A package folder whose files a git checkout tracks (an editable install points into one) is that
    checkout's: written as a folder, its files would change behind git and a journal would sit in the repo."""
    if (package / JOURNAL_DIR).exists():
        return  # applied so before this check: revert and recover must still reach it
    git = Git(package)
    top = git.try_path("rev-parse", "--show-toplevel")[1]
    if top is None or not git.run("ls-files", "-z", "--", ".", strip=False):
        return
    raise FatalError(
        f"{package} is tracked by the git checkout {top} (an editable install?); nothing was changed: apply to the "
        f"checkout, {hints.apply_to(top)}"
    )


def _unusable_checkout(root: Path, stderr: str) -> str:
    """A checkout git will not work in is never patched as a plain folder: its tracked files are git's."""
    if "dubious ownership" in stderr:
        return (
            f"{root} is a git checkout owned by another user, which git refuses to use (safe.directory); "
            f"nothing was changed: if you trust it, `git config --global --add safe.directory {shlex.quote(str(root))}`, "
            "or run as its owner"
        )
    return f"{root} has a .git that git cannot use ({git_reason(stderr)}); nothing was changed"


def _found_inside(given: Path, package: Path, project: ProjectKind) -> Target:
    """The user named a folder above the package: say which folder will be read and written."""
    say(f"using the package folder {package} (found inside {given})")
    return Target(PACKAGE_FOLDER, package, project)


def _lock_holder(fd: int, patience_s: float = 1.0) -> str:
    """The pid the lock's holder wrote. It writes it just after taking the lock, so until then the file
    still names the run before it (a process that is gone) or a mix of the two: read again, briefly."""
    deadline = time.monotonic() + patience_s
    while True:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit() and RunMark(int(text), None).alive():
            return text
        if time.monotonic() > deadline:
            return "unknown"
        time.sleep(0.01)


def _open_lock(target: Target) -> int:
    key = hashlib.sha256(os.fsencode(target.root.resolve())).hexdigest()[:24]
    lock = cache_folder("locks") / f"{key}.lock"
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise unwritable_cache(lock, exc) from None


def working_run(target: Target) -> str | None:
    """The pid of the sglpatch run working on `target` now (it holds the lock target_lock takes), or None."""
    fd = _open_lock(target)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _lock_holder(fd)
    finally:
        os.close(fd)


def busy(target: Target, pid: str) -> str:
    """Why a run does not start while another one works on `target`."""
    return f"another sglpatch run is working on {target.root} (pid {pid}); wait for it to finish"


@contextmanager
def target_lock(target: Target):
    """One sglpatch run per target at a time; a second one is refused, not queued."""
    fd = _open_lock(target)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FatalError(busy(target, _lock_holder(fd))) from None
        mine = f"{os.getpid()}\n".encode()
        os.pwrite(fd, mine, 0)  # over the last holder's pid, then cut to length: the file is never empty
        os.ftruncate(fd, len(mine))
        yield
    finally:
        os.close(fd)


@contextmanager
def writing(target: Target, command: str):
    """A command's hold on `target` while it may write there: the one sglpatch run working on it (target_lock),
    and SIGINT/SIGTERM answered with a line saying where the target stands (interrupts.guarded)."""
    with guarded(command, str(target.root)), target_lock(target):
        yield
