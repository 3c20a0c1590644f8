"""`sglpatch clean`: delete build/, where sglpatch keeps what it makes (each line's default base, reports, PR
bodies, other Pythons' venvs), unless a git checkout there holds work of the user's that would go with it.

The default bases are git repos a user may commit in (to export a patch from, or to try one): such commits,
stashes, edits and untracked files are named, with the move that keeps each checkout, and nothing is deleted.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shlex
import shutil
from contextlib import ExitStack, contextmanager
from pathlib import Path

from sglpatch import hints, project
from sglpatch.errors import FatalError
from sglpatch.git import GitFailed
from sglpatch.output import plural, say, show_path
from sglpatch.targets import Target, checkout_at, target_lock, work_only_in

# build/ is renamed to this, then deleted: a run cut short (Ctrl-C, a kill) leaves no half-deleted checkout in
# build/ for the next one to look at, only this, which the next one deletes first
DELETING = "build.deleting"
# written in build/ just before its rename, deleted last: when the checkouts a clean cut short deleted were looked at
LOOKED = ".sglpatch-clean-looked"
PARTIAL = ".partial"  # rebase/default_base.py and git_releases.py lay a base out in NAME.partial, then rename it


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    with _one_clean_at_a_time(project.PROJECT_ROOT):
        return _clean(project.PROJECT_ROOT / "build")


@contextmanager
def _one_clean_at_a_time(root: Path):
    """A second clean while one deletes build/ took the first's `build.deleting` for one left by a clean cut short,
    said so and deleted it beside the first, which then failed in one line naming a file the other had deleted
    (exit 2, its work done): refused instead (a lock on the project folder itself: no file is made)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FatalError(
                f"another `sglpatch clean` is deleting {show_path(root / 'build')} now; nothing was changed: let it "
                "finish"
            ) from None
        yield
    finally:
        os.close(fd)


def _clean(build: Path) -> int:
    doomed = build.with_name(DELETING)
    if doomed.is_symlink() or doomed.exists() and not doomed.is_dir():
        raise FatalError(
            f"{show_path(doomed)}, the name clean gives build/ while it deletes it, is a "
            f"{'link' if doomed.is_symlink() else 'file'} clean did not make; nothing was deleted: move it "
            f"elsewhere, then {hints.clean()} deletes build/"
        )
    if doomed.exists():
        _refuse_what_cannot_go(doomed)
        _refuse_changed_since_looked(doomed)
        say(f"deleting {show_path(doomed)}, left by a clean cut short (its checkouts were looked at then)")
        _delete(doomed)
    if build.is_symlink():  # as `rm -rf build` would: the link goes, what it points to stays
        build.unlink()
        say(f"removed the link {show_path(build)}; the folder it named is left as it is")
        return 0
    if not build.exists():
        say(f"nothing to clean: {show_path(build)} does not exist")
        return 0
    checkouts = [checkout_at(root) for root in _checkouts_under(build)]
    with ExitStack() as held:
        for checkout in checkouts:  # no sglpatch run works on one while it is looked at
            held.enter_context(target_lock(checkout))
        _refuse_work_of_the_user(checkouts)
        _refuse_what_cannot_go(build)
        (build / LOOKED).write_bytes(b"")
        build.rename(doomed)  # at once: a clean cut short leaves build/ whole, or none of it
    say(f"removing {show_path(build)} ({plural(len(checkouts), 'git checkout')} of sglpatch's, and the rest)")
    _delete(doomed)
    return 0


def _delete(doomed: Path) -> None:
    """Everything but the mark of when it was looked at, then the rest: a clean cut short leaves the mark."""
    for entry in os.scandir(doomed):
        if entry.name == LOOKED:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    shutil.rmtree(doomed)


def _refuse_changed_since_looked(doomed: Path) -> None:
    """A file under `doomed` changed after the clean cut short looked at it (a commit or an edit from a shell or an
    editor still in a checkout there), or a folder moved in since, is not what was looked at. Without the mark (a clean before this one, or a
    folder of that name) its checkouts are looked at as build/'s are."""
    mark = doomed / LOOKED
    if not mark.is_file():
        _refuse_work_of_the_user([checkout_at(root) for root in _checkouts_under(doomed)])
        return
    looked = mark.stat().st_ctime_ns
    for folder, subfolders, files in os.walk(doomed):
        # a folder moved in keeps its files' ctimes, its own changes: one whose entries did not change meanwhile
        # (its mtime), so not one the cut-short delete was emptying, was moved (or chmod'ed) since the look
        moved = [os.path.join(folder, name) for name in subfolders]
        moved = [path for path in moved if os.lstat(path).st_ctime_ns > looked >= os.lstat(path).st_mtime_ns]
        for path in moved + [os.path.join(folder, name) for name in files]:
            if os.lstat(path).st_ctime_ns > looked:
                raise FatalError(
                    f"{show_path(path)} changed after the clean cut short looked at {show_path(doomed)}, so it may "
                    f"hold work of yours; nothing was deleted: {hints.move_aside(doomed)} keeps it all, then "
                    f"{hints.clean()} deletes build/"
                )


def _checkouts_under(build: Path) -> list[Path]:
    """The git checkouts under `build` (a folder with a .git), and those inside one (a repo of the user's in a
    folder the outer one ignores, a submodule), not looking inside a .git or through a link; not a base's
    `NAME.partial`, the layout a cut-short apply left, which the next apply deletes unread too."""
    found = []
    for folder, subfolders, files in os.walk(build):
        if Path(folder).parent == build and folder.endswith(PARTIAL):
            subfolders.clear()
            continue
        if os.path.lexists(os.path.join(folder, ".git")) or _bare(subfolders, files):
            found.append(Path(folder))
        if ".git" in subfolders:
            subfolders.remove(".git")
    return sorted(found)


def _bare(subfolders: list[str], files: list[str]) -> bool:
    """A git repository with no work tree (`git init --bare`, a `--separate-git-dir`): HEAD, objects/, refs/, as
    git itself tells one. sglpatch makes none under build/ (its own are in the cache): one is the user's."""
    return "HEAD" in files and {"objects", "refs"} <= set(subfolders)


def _refuse_what_cannot_go(folder: Path) -> None:
    """A folder this user cannot delete from (another user's, or root's from a run in a container) stops
    `shutil.rmtree` part-way, and every clean after it: it is found first, and nothing goes."""
    for inner, _, _ in os.walk(folder, onerror=_raise):
        if not os.access(inner, os.W_OK | os.X_OK):
            owner, me, top = _user(os.stat(inner).st_uid), _user(os.geteuid()), shlex.quote(str(folder))
            raise FatalError(
                f"{show_path(inner)} is a folder of {owner}'s this user cannot delete from; nothing was deleted: "
                f"make it yours and writable (`sudo chown -R {me} {top} && chmod -R u+w {top}`), then "
                f"{hints.clean()} deletes it"
            )


def _raise(error: OSError) -> None:
    raise error


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _work_in(checkout: Target) -> list[str]:
    if not os.path.lexists(checkout.root / ".git"):  # a repository with no work tree (_bare)
        return ["a git repository with no work tree (sglpatch makes none under build/)"]
    try:
        return work_only_in(checkout)
    except GitFailed as exc:
        return [_unreadable(checkout, exc)]


def _unreadable(checkout: Target, exc: GitFailed) -> str:
    if "dubious ownership" in exc.stderr:
        where = shlex.quote(str(checkout.root))
        return (
            "a git repository of another user's, which git will not read (if you trust it, `git config --global "
            f"--add safe.directory {where}` lets clean look at it)"
        )
    return f"a git repository git cannot read here ({exc})"


def _in_worktrees(root: Path) -> bool:
    """A `git worktree add` checkout (its .git a file naming a git dir under another repository's worktrees/), or a
    repository with such checkouts: moved by `mv`, the links between them point at the old place."""
    dot_git = root / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        return (dot_git / "worktrees").is_dir() and any((dot_git / "worktrees").iterdir())
    if not dot_git.is_file() or dot_git.is_symlink():
        return False
    text = dot_git.read_bytes().removeprefix(b"gitdir: ").strip()
    return Path(os.fsdecode(text)).parent.name == "worktrees"


def _refuse_work_of_the_user(checkouts: list[Target]) -> None:
    held, advised = [], set()
    for checkout in checkouts:
        work = _work_in(checkout)
        if work:
            where = checkout.root
            move = hints.move_worktree_aside if _in_worktrees(where) else hints.move_aside
            held.append(f"{show_path(where)} holds {'; '.join(work)} ({move(where, advised)} keeps it)")
    if held:
        raise FatalError(
            f"{' and '.join(held)}; nothing was deleted: move {'it' if len(held) == 1 else 'each'} out of build/ as "
            f"shown, then {hints.clean()} deletes the rest"
        )
