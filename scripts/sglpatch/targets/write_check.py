"""After a write to a checkout, check that it is what the tool believes it is; move it back without git's help.

`git checkout` can exit 0 and still leave files as they were (a read-only work
tree with a writable .git: "error: unable to unlink old ..."): HEAD and the
index then say one thing and the files another. Every write to a checkout is
followed by a check here (a package folder's, by its journal: package_writes.py),
and a mismatch is rolled back or refused, never reported as success.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.git import NO_HOOKS, blob_id
from sglpatch.targets.target import Target, dirty_paths


def checkout_mismatch(target: Target, branch: str | None, head: str, touched: list[str]) -> list[str]:
    """What differs from "on `branch` (None: detached) at `head`, the series' files as committed"; [] if nothing."""
    unwritten = [f"{path} is not as committed" for path in dirty_paths(target, touched)]
    return head_mismatch(target, branch, head) + unwritten


def head_mismatch(target: Target, branch: str | None, head: str) -> list[str]:
    """What differs from "HEAD on `branch` (None: detached) at `head`"; [] if nothing."""
    git = target.git
    problems = []
    if branch is not None and git.current_branch() != branch:
        problems.append(f"HEAD is on {git.current_branch() or 'a detached commit'}, not {branch}")
    if git.rev_parse("HEAD") != head:
        problems.append(f"HEAD is at {git.rev_parse('HEAD') or 'nothing'}, not {head[:12]}")
    return problems


def previous_head(target: Target, record) -> tuple[str | None, str]:
    """Where `record`'s apply found HEAD: its previous branch (None when it was detached) and that commit now."""
    git = target.git
    is_branch = git.rev_parse(f"refs/heads/{record.previous}") is not None
    commit = git.rev_parse(f"refs/heads/{record.previous}" if is_branch else record.previous) or record.previous
    return (record.previous if is_branch else None), commit


def restore_previous(target: Target, record) -> list[str]:
    """HEAD, the index and the series' files as they were before `record`'s switch (HEAD on its previous branch,
    or detached at that commit), moved back only where they differ; returns what still differs."""
    branch, commit = previous_head(target, record)
    touched = target.paths_or_package(record.touched)
    if not checkout_mismatch(target, branch, commit, touched):
        return []
    return move_checkout(target, record.previous, record.head, touched)


def move_checkout(target: Target, to: str, away_from: str, touched: list[str]) -> list[str]:
    """Point HEAD at `to` (a branch name or a commit) and make the index and the series' files match it,
    touching nothing else: `git checkout` refuses here, as the work tree and the index disagree.
    Files that exist only in `away_from` are removed if they hold exactly its bytes, or those git wrote for it (its
    smudge filter and eol settings applied). Returns what still differs."""
    git = target.git
    if git.rev_parse(f"refs/heads/{to}") is not None:
        git.run("symbolic-ref", "HEAD", f"refs/heads/{to}")
        commit = git.run("rev-parse", f"refs/heads/{to}")
    else:
        git.run("update-ref", "--no-deref", "HEAD", to)
        commit = to
    there = tree_blobs(target, commit, touched)
    git.try_run("reset", "-q", commit, "--", *touched)
    if there:
        git.try_run(*NO_HOOKS, "checkout", "-q", commit, "--", *there)
    leaving = tree_blobs(target, away_from, touched) if away_from else {}
    for path in set(touched) - set(there):
        local = target.root / path
        if path in leaving and local.is_file() and not local.is_symlink():
            blob = blob_id(local.read_bytes())
            if blob == leaving[path] or written_by_git(target, away_from, path, blob):
                try:
                    remove_file_and_emptied_folders(local, target.root)
                except OSError:
                    pass
    return checkout_mismatch(target, to if git.rev_parse(f"refs/heads/{to}") else None, commit, touched)


def written_by_git(target: Target, commit: str, path: str, blob: str) -> bool:
    """Whether a file whose bytes are `blob` holds what git writes into the work tree for `path` in `commit`
    (its smudge filter and eol settings applied); False where `commit` has no such file."""
    status, written, _ = target.git.call(("cat-file", "--filters", f"{commit}:{path}"))
    return status == 0 and blob_id(written) == blob


def remove_file_and_emptied_folders(path: Path, root: Path) -> None:
    """Remove `path`, and the folders under `root` that this leaves empty (git removes them the same way)."""
    path.unlink()
    folder = path.parent
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def tree_blobs(target: Target, commit: str, paths: list[str]) -> dict[str, str]:
    """Blob id per path that exists in `commit`."""
    found = {}
    for entry in target.git.entries("ls-tree", "-r", "-z", commit, "--", *paths):
        meta, path = entry.split("\t", 1)
        found[path] = meta.split()[2]
    return found
