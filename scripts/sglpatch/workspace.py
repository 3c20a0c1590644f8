"""A scratch git repository where the series is tried before anything real is touched.

The workspace holds only an index (no work tree files): `git apply --cached`
runs the series against it patch by patch. For a git target it borrows the
target's objects through `alternates` and starts from the target's HEAD tree,
so the commits built here can be fetched into the target in one step. For a
package folder it starts from the touched files' bytes. Either way the target
is only read until the caller decides to write.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from sglpatch.git import APPLY, Git, init_repo, own_repo
from sglpatch.safety import scratch
from sglpatch.series import Patch

_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$")
_CONFLICTED = re.compile(r"^U (.+)$")  # `git apply --3way`: a file its merge left with conflicts
_FILE_ERROR = re.compile(
    r"^error: (.+?): (does not exist in index|already exists in index|patch does not apply|No such file or directory|does not match index)$"
)


@dataclass
class ApplyFailure:
    patch: Patch
    path: str | None
    hunk: str | None
    reason: str

    def describe(self) -> str:
        if self.hunk:
            return f"{self.patch.name} does not apply: {self.path}, {self.hunk}"
        if self.path:
            return f"{self.patch.name} does not apply: {self.path}: {self.reason}"
        return f"{self.patch.name} does not apply: {self.reason}"


def explain_failure(patch: Patch, stderr: str) -> ApplyFailure:
    lines = [line.strip() for line in stderr.splitlines()]
    if conflicted := [match.group(1) for line in lines if (match := _CONFLICTED.match(line))]:
        return ApplyFailure(patch, ", ".join(conflicted), None, "its 3-way merge conflicts with the changes there")
    path = reason = None
    for line in lines:
        if match := _FAILED_AT.match(line):
            path, line_no = match.group(1), int(match.group(2))
            hunk = patch.hunk_at(path, line_no)
            label = f"hunk #{hunk.number} {hunk.header.split(' @@')[0]} @@" if hunk else f"hunk at line {line_no}"
            return ApplyFailure(patch, path, label, "patch does not apply")
        if match := _FILE_ERROR.match(line):
            path, reason = match.group(1), match.group(2)
    return ApplyFailure(patch, path, None, reason or (stderr.strip().splitlines() or ["git apply failed"])[-1])


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.git = own_repo(root).as_sglpatch()  # its commits are scratch, unless `commit` is given a committer

    # -- creation ------------------------------------------------------------------

    @classmethod
    def from_git_target(cls, target_git: Git, rev: str = "HEAD", extra_objects: list[Path] = ()) -> "Workspace":
        tree = target_git.run("rev-parse", f"{rev}^{{tree}}")
        stores = [target_git.common_dir() / "objects", *extra_objects]  # a `git worktree` shares the main objects
        with cls._empty() as ws:
            ws._borrow(stores)
            ws.git.run("read-tree", tree)
            return ws.keep()

    def _borrow(self, stores: list[Path]) -> None:
        """Read objects from `stores` too (git's alternates). The file takes a path per line, in git's own
        quoting: each store is named through a link beside the workspace's objects, so a target's path with
        a newline, a quote or any byte is never written into it."""
        objects = self.root / ".git" / "objects"
        lines = []
        for number, store in enumerate(stores):
            (self.root / ".git" / f"borrowed-{number}").symlink_to(store)
            lines.append(f"../borrowed-{number}\n")  # relative to the objects folder
        (objects / "info" / "alternates").write_text("".join(lines))

    @classmethod
    def from_files(cls, files: dict[str, bytes | None], executables: set[str] = frozenset()) -> "Workspace":
        with cls._empty() as ws:
            entries = []
            for path, data in sorted(files.items()):
                if data is None:
                    continue
                mode = "100755" if path in executables else "100644"
                entries.append(f"{mode} {ws.write_blob(data)}\t{path}\n")
            if entries:
                ws.git.run_with_input(["update-index", "--index-info"], "".join(entries).encode())
            return ws.keep()

    @classmethod
    def _empty(cls) -> "Workspace":
        """A new workspace; inside `with`, removed again unless `keep` is called (a failure half-way leaks nothing)."""
        scratch.remove_stale()
        ws = cls(scratch.make_folder("ws"))
        try:
            init_repo(ws.root)
        except BaseException:
            ws.close()
            raise
        return ws

    def keep(self) -> "Workspace":
        self._kept = True
        return self

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Workspace":
        self._kept = False
        return self

    def __exit__(self, *exc) -> None:
        if not self._kept:
            self.close()

    # -- objects -------------------------------------------------------------------

    def write_blob(self, data: bytes) -> str:
        return self.git.run_with_input(["hash-object", "-w", "--no-filters", "--stdin"], data)

    def blobs(self, paths: list[str]) -> dict[str, str]:
        """Blob id per path in the index ('' for a path that is absent)."""
        listed = self.git.run("ls-files", "-s", "-z", "--", *paths, strip=False)
        found = {}
        for entry in filter(None, listed.split("\0")):
            meta, path = entry.split("\t", 1)
            found[path] = meta.split()[1]
        return {p: found.get(p, "") for p in paths}

    def read(self, path: str) -> bytes | None:
        blob = self.blobs([path])[path]
        return self.git.run_bytes("cat-file", "blob", blob) if blob else None

    def executables(self, paths: list[str]) -> set[str]:
        """The paths whose index entry has mode 100755."""
        listed = self.git.run("ls-files", "-s", "-z", "--", *paths, strip=False)
        return {e.split("\t", 1)[1] for e in filter(None, listed.split("\0")) if e.startswith("100755 ")}

    # -- patches -------------------------------------------------------------------

    def applies(self, patch: Patch, reverse: bool = False, three_way: bool = False) -> bool:
        args = [*APPLY, "--cached", "--check"] + (["-R"] if reverse else []) + (["--3way"] if three_way else [])
        status, _, _ = self.git.try_run(*args, "-", stdin=patch.data)
        return status == 0

    def apply(self, patch: Patch, reverse: bool = False, three_way: bool = False) -> ApplyFailure | None:
        args = [*APPLY, "--cached"] + (["-R"] if reverse else []) + (["--3way"] if three_way else [])
        before = self.git.run("write-tree")
        # the patch's own bytes: a package folder's view of a patch exists in memory only
        status, _, err = self.git.try_run(*args, "-", stdin=patch.data)
        if status == 0:
            return None
        self.git.run("read-tree", before)  # a failed --3way can leave conflict stages
        return explain_failure(patch, err)

    def copy_commit_to(self, commit: str, target: Git, ref: str, force: bool = True) -> None:
        """Copy `commit` (and what it needs) into `target`'s repository as `ref`, leaving no FETCH_HEAD."""
        self.git.run("update-ref", "refs/heads/copied", commit)
        source = f"{'+' if force else ''}refs/heads/copied:{ref}"
        # --no-recurse-submodules: with `submodule.recurse` (or `fetch.recurseSubmodules`) in the target's config
        # git also fetched each of its submodules from their remotes: refused where one is out of reach (a
        # machine offline), else the submodules' own FETCH_HEAD and remote-tracking branches written
        fetch = ("fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules")
        target.run(*fetch, str(self.root), source)

    def commit(
        self, patch: Patch, tree: str, parent: str, committer: tuple[str, str] | None, message: str | None = None
    ) -> str:
        """`patch` as a commit by its author; committed by `committer` (for a user's branch), else by sglpatch;
        its message is the patch's unless `message` is given."""
        name, email = _split_ident(patch.author)
        env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": patch.date}
        if committer:
            env.update(GIT_COMMITTER_NAME=committer[0], GIT_COMMITTER_EMAIL=committer[1])
        message = message or f"{patch.subject}\n\n{patch.body}\n"
        return self.git.with_env(**env).run_with_input(["commit-tree", tree, "-p", parent], message.encode())


def _split_ident(ident: str) -> tuple[str, str]:
    match = re.fullmatch(r"\s*(.*?)\s*<([^<>]*)>\s*", ident)
    if not match:
        return ident.strip() or "unknown", "unknown@localhost"
    return match.group(1) or match.group(2), match.group(2)
