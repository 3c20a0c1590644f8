"""Carrying the series to another base: is each patch clean, 3-way, conflicting, or upstream?

The series is first made into commits on the pinned base (in a workspace that
borrows the base's objects). Then, on a new base, each patch in order is:
- upstream, when the new base already has it: the patch reverse-applies there,
  or a marker it declares (`Upstream-Marker: TEXT in PATH`) is found there, or
  its `Upstream-PR: N` is named by a `(#N)` commit between the old and new base;
- clean, when `git apply` takes it as it is;
- 3-way, when a merge of the patch commit onto the new base (with rename
  detection) succeeds;
- conflict otherwise, naming the files.
A patch that landed is applied on top so the next patch sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.series import Patch, Series
from sglpatch.workspace import Workspace

CLEAN = "clean"
THREE_WAY = "3-way"
CONFLICT = "conflict"
UPSTREAM = "upstream"

_MARKER = re.compile(r"^(?P<text>.+?) in (?P<path>python/sglang/\S*)$")


@dataclass
class Outcome:
    patch: Patch
    kind: str
    detail: str = ""
    files: list[str] = field(default_factory=list)


@dataclass
class SeriesCommits:
    """The series as commits on the pinned base, inside a workspace."""

    workspace: Workspace
    base: str
    commits: list[str]


def series_commits(
    source: Git,
    base_rev: str,
    patches: list[Patch],
    what: str = "the series",
    three_way: bool = False,
    committer: tuple[str, str] | None = None,
) -> SeriesCommits:
    """`patches` as commits on `base_rev` (one each, authorship kept) in a workspace borrowing `source`'s objects."""
    workspace = Workspace.from_git_target(source, rev=base_rev)
    base = source.run("rev-parse", f"{base_rev}^{{commit}}")
    commits, parent = [], base
    for patch in patches:
        failure = workspace.apply(patch, three_way=three_way)
        if failure:
            workspace.close()
            raise FatalError(f"{what} does not apply to {base_rev}: {failure.describe()}")
        parent = workspace.commit(patch, workspace.git.run("write-tree"), parent, committer)
        commits.append(parent)
    return SeriesCommits(workspace, base, commits)


def upstream_reason(git: Git, rev: str, patch: Patch, history: tuple[str, str] | None = None) -> str | None:
    """Why `rev` already has `patch`, or None. `git` must see rev's objects and may use its index."""
    marker = patch.trailer("upstream-marker")
    if marker and (match := _MARKER.match(marker)):
        status, _, _ = git.try_run("grep", "-q", "-F", "-e", match.group("text"), rev, "--", match.group("path"))
        if status == 0:
            return f"marker {match.group('text')!r} found in {match.group('path')}"
    number = patch.trailer("upstream-pr")
    if history and number and number.isdigit():
        old, new = history
        found = git.run("log", "--format=%h %s", "--fixed-strings", f"--grep=(#{number})", f"{old}..{new}")
        if found:
            return f"upstream PR #{number} is in {found.splitlines()[0]}"
    git.run("read-tree", rev)
    status, _, _ = git.try_run("apply", "--cached", "--check", "-R", str(patch.path))
    return "its change is already there (reverse-applies)" if status == 0 else None


def carry_series(
    commits: SeriesCommits, series: Series, onto: str, history: tuple[str, str] | None = None
) -> tuple[list[Outcome], str]:
    """Replay the series onto `onto` in the workspace; returns outcomes and the last commit."""
    git = commits.workspace.git
    current = git.run("rev-parse", f"{onto}^{{commit}}")
    outcomes = []
    for patch, commit in zip(series.patches, commits.commits, strict=True):
        reason = upstream_reason(git, current, patch, history)
        if reason:
            outcomes.append(Outcome(patch, UPSTREAM, reason))
            continue
        git.run("read-tree", current)
        if git.try_run("apply", "--cached", str(patch.path))[0] == 0:
            current = _commit_tree(git, git.run("write-tree"), current, commit)
            outcomes.append(Outcome(patch, CLEAN))
            continue
        tree, conflicted = merge_onto(git, current, commit)
        if tree is None:
            outcomes.append(Outcome(patch, CONFLICT, "conflicts in " + ", ".join(conflicted), conflicted))
            continue
        current = _commit_tree(git, tree, current, commit)
        outcomes.append(Outcome(patch, THREE_WAY, "merged with changes"))
    return outcomes, current


def merge_onto(git: Git, current: str, commit: str) -> tuple[str | None, list[str]]:
    """Cherry-pick `commit` onto `current` without a work tree: (tree, []) or (None, conflicted files)."""
    parent = git.run("rev-parse", f"{commit}^")
    # A stand-in for `current` whose parent is the patch's parent makes that parent the
    # merge base, as in a cherry-pick (git 2.39's merge-tree has no --merge-base).
    stand_in = git.run_with_input(["commit-tree", f"{current}^{{tree}}", "-p", parent], b"stand-in\n")
    status, out, _ = git.try_run("merge-tree", "--write-tree", "--name-only", "--no-messages", stand_in, commit)
    lines = out.splitlines()
    if status == 0:
        return lines[0], []
    if status == 1:
        return None, sorted(set(lines[1:])) or ["(unknown)"]
    raise FatalError(f"git merge-tree failed on {commit[:12]}")


def _commit_tree(git: Git, tree: str, parent: str, original: str) -> str:
    message = git.run("log", "-1", "--format=%B", original).encode()
    env = dict(
        zip(
            ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE"),
            git.run("log", "-1", "--format=%an%x00%ae%x00%aI", original).split("\0"),
            strict=True,
        )
    )
    return git.with_env(**env).run_with_input(["commit-tree", tree, "-p", parent], message)
