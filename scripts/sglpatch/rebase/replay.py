"""The replay engine: how each patch of the series lands on another base. Drift and rebase both ask it.

The series is first made into commits on the pinned base (in a workspace that
borrows the base's objects). Then, on a new base, each patch in order is
classified by `land`, the one place that decides it:
- upstream, when the new base already has it: the patch reverse-applies there,
  or a marker it declares (`Upstream-Marker: TEXT in PATH`) is found there, or
  the patch is the local carry of a PR (`Upstream-PR: N`) that landed between the
  old and new base: a commit whose subject ends with `(#N)`, not reverted since.
  `Extends-PR: N` only cites a PR the patch builds on: it never marks it upstream;
- clean, when `git apply` takes it as it is;
- 3-way, when a merge of the patch commit onto the new base (with rename
  detection) succeeds;
- conflict otherwise, naming the files.
Drift replays the whole series without a work tree (`carry_series`: a patch
that landed is committed on top so the next patch sees it); rebase prints that
same replay (`picture`) before it starts, then asks `land` for each patch and
cherry-picks it in the checkout.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import APPLY, Git
from sglpatch.series import PACKAGE_PREFIX, Patch, Series
from sglpatch.workspace import Workspace, explain_failure


class Landing(StrEnum):
    """How a patch lands on a new base (the values are what the drift report writes)."""

    CLEAN = "clean"
    THREE_WAY = "3-way"
    CONFLICT = "conflict"
    UPSTREAM = "upstream"


_MARKER = re.compile(rf"^(?P<text>.+?) in (?P<path>{re.escape(PACKAGE_PREFIX)}\S*)$")


@dataclass
class Outcome:
    patch: Patch
    kind: Landing
    detail: str = ""
    files: list[str] = field(default_factory=list)
    hunks: list[str] = field(default_factory=list)  # a conflict's first failing hunk per file


@dataclass
class Step:
    """What `land` found for one patch on one commit."""

    kind: Landing
    upstream: str | None = None  # why the base already has the patch, or None
    tree: str | None = None  # the tree with the patch, when it landed clean or 3-way
    files: list[str] = field(default_factory=list)  # the conflicted files


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
    message_of: Callable[[Patch], str] | None = None,
    extra_objects: list[Path] = (),
) -> SeriesCommits:
    """`patches` as commits on `base_rev` (one each, authorship kept) in a workspace borrowing `source`'s objects
    (and `extra_objects`' stores); each message is the patch's own, or `message_of(patch)`."""
    workspace = Workspace.from_git_target(source, rev=base_rev, extra_objects=extra_objects)
    base = source.run("rev-parse", f"{base_rev}^{{commit}}")
    commits, parent = [], base
    for patch in patches:
        failure = workspace.apply(patch, three_way=three_way)
        if failure:
            workspace.close()
            raise FatalError(f"{what} does not apply to {base_rev}: {failure.describe()}")
        message = message_of(patch) if message_of else None
        parent = workspace.commit(patch, workspace.git.run("write-tree"), parent, committer, message)
        commits.append(parent)
    return SeriesCommits(workspace, base, commits)


@contextmanager
def prefix_worktrees(git: Git, tag: str, patches: list[Patch], ref: str, scratch: str):
    """Worktrees of the base (`tag`) and of the base with patches 1..k, for each k, in a temporary folder whose name
    starts with `scratch`; the series' last commit is under `ref` meanwhile. All removed afterwards."""
    if patches:
        commits = series_commits(git, tag, patches)
        try:
            commits.workspace.copy_commit_to(commits.commits[-1], git, ref)
        finally:
            commits.workspace.close()
        revisions = [commits.base, *commits.commits]
    else:
        revisions = [git.run("rev-parse", f"{tag}^{{commit}}")]
    with tempfile.TemporaryDirectory(prefix=scratch) as tmp:
        trees = []
        try:
            for k, rev in enumerate(revisions):
                tree = Path(tmp) / f"prefix-{k}"
                git.run("worktree", "add", "-q", "--detach", str(tree), rev)
                trees.append(tree)
            yield trees
        finally:
            for tree in trees:
                git.try_run("worktree", "remove", "--force", str(tree))
            git.try_run("update-ref", "-d", ref)


def upstream_reason(git: Git, rev: str, patch: Patch, history: tuple[str, str] | None = None) -> str | None:
    """Why `rev` already has `patch`, or None. `git` must see rev's objects and may use its index."""
    marker = patch.trailer("upstream-marker")
    if marker and (match := _MARKER.match(marker)):
        status, _, _ = git.try_run("grep", "-q", "-F", "-e", match.group("text"), rev, "--", match.group("path"))
        if status == 0:
            return f"marker {match.group('text')!r} found in {match.group('path')}"
    number = patch.trailer("upstream-pr")
    if history and number and number.isdigit() and (landed := landed_pr_commit(git, number, history)):
        return f"upstream PR #{number} is in {landed}"
    git.run("read-tree", rev)
    status, _, _ = git.try_run(*APPLY, "--cached", "--check", "-R", str(patch.path))
    return "its change is already there (reverse-applies)" if status == 0 else None


def landed_pr_commit(git: Git, number: str, history: tuple[str, str]) -> str | None:
    """The commit ("<short id> <subject>") by which PR #`number` landed between history's old and new base,
    or None: the newest commit naming the PR must be its landing (subject ending in `(#N)`), not a revert
    (`Revert "... (#N)" (#M)`), which never marks anything upstream and undoes a landing before it."""
    old, new = history
    log = git.run("log", "--format=%h %s", "--fixed-strings", f"--grep=(#{number})", f"{old}..{new}")
    for line in log.splitlines():
        subject = line.split(" ", 1)[1] if " " in line else ""
        if subject.startswith('Revert "') and f"(#{number})" in subject:
            return None
        if subject.endswith(f"(#{number})"):
            return line
    return None


def history_between(git: Git, base: str, onto: str) -> tuple[str, str] | None:
    """(base, onto) when onto descends from base (a real upstream history to search for PRs), else None."""
    return (base, onto) if git.is_ancestor(base, onto) else None


def land(
    git: Git, current: str, patch: Patch, commit: str, history: tuple[str, str] | None, merge_upstream: bool = False
) -> Step:
    """How `patch` (as `commit` on the pinned base) lands on commit `current`. A patch already upstream is
    UPSTREAM, unless `merge_upstream` (a rebase that keeps it), which says how it merges and keeps the reason.
    `git` must see both commits' objects and may use its index."""
    reason = upstream_reason(git, current, patch, history)
    if reason and not merge_upstream:
        return Step(Landing.UPSTREAM, reason)
    git.run("read-tree", current)
    if git.try_run(*APPLY, "--cached", str(patch.path))[0] == 0:
        return Step(Landing.CLEAN, reason, git.run("write-tree"))
    tree, conflicted = merge_onto(git, current, commit)
    if tree is None:
        return Step(Landing.CONFLICT, reason, files=conflicted)
    return Step(Landing.THREE_WAY, reason, tree)


def carry_series(
    commits: SeriesCommits, series: Series, onto: str, history: tuple[str, str] | None = None
) -> tuple[list[Outcome], str]:
    """Replay the series onto `onto` in the workspace; returns outcomes and the last commit."""
    return carry_patches(commits.workspace.git, list(zip(series.patches, commits.commits, strict=True)), onto, history)


def carry_patches(
    git: Git,
    pairs: list[tuple[Patch, str]],
    onto: str,
    history: tuple[str, str] | None = None,
    committer: tuple[str, str] | None = None,
    stop_at_conflict: bool = False,
) -> tuple[list[Outcome], str]:
    """Replay (patch, its commit) pairs onto `onto`; outcomes and the last commit. A patch that lands is
    committed with its commit's message and author (committer: `committer`, else sglpatch); a conflict's
    outcome names its files and, per file, the first hunk that does not apply there (`hunks`)."""
    current = git.run("rev-parse", f"{onto}^{{commit}}")
    outcomes = []
    for patch, commit in pairs:
        step = land(git, current, patch, commit, history)
        if step.kind == Landing.UPSTREAM:
            outcomes.append(Outcome(patch, step.kind, step.upstream))
        elif step.kind == Landing.CONFLICT:
            hunks = [conflict_hunk(git, current, patch, path) for path in step.files]
            outcomes.append(Outcome(patch, step.kind, "conflicts in " + ", ".join(step.files), step.files, hunks))
            if stop_at_conflict:
                break
        else:
            current = _commit_tree(git, step.tree, current, commit, committer)
            detail = "merged with changes" if step.kind == Landing.THREE_WAY else ""
            outcomes.append(Outcome(patch, step.kind, detail))
    return outcomes, current


def conflict_hunk(git: Git, current: str, patch: Patch, path: str) -> str:
    """Where `patch` fails on commit `current` in `path`: 'PATH, hunk #N @@ ... @@' (or the reason)."""
    git.run("read-tree", current)
    status, _, err = git.try_run(*APPLY, "--cached", "--check", f"--include={path}", str(patch.path))
    failure = explain_failure(patch, err) if status else None
    if failure and failure.hunk:
        return f"{failure.path}, {failure.hunk}"
    return f"{path} ({failure.reason if failure else 'the 3-way merge conflicts'})"


def picture(commits: SeriesCommits, series: Series, onto: str, history: tuple[str, str] | None) -> list[Outcome]:
    """Every patch's state on `onto`, the series replayed there as drift does: what a rebase prints first."""
    return carry_series(commits, series, onto, history)[0]


def describe(outcome: Outcome) -> str:
    """One patch's state as one line: `NAME: KIND (why)`; drift's JSON holds the same kind and detail."""
    return f"{outcome.patch.name}: {outcome.kind}" + (f" ({outcome.detail})" if outcome.detail else "")


def merge_onto(git: Git, current: str, commit: str) -> tuple[str | None, list[str]]:
    """Cherry-pick `commit` onto `current` without a work tree: (tree, []) or (None, conflicted files)."""
    parent = git.run("rev-parse", f"{commit}^")
    # A stand-in for `current` whose parent is the patch's parent makes that parent the
    # merge base, as in a cherry-pick (git 2.39's merge-tree has no --merge-base).
    stand_in = git.as_sglpatch().run_with_input(["commit-tree", f"{current}^{{tree}}", "-p", parent], b"stand-in\n")
    status, out, _ = git.try_run("merge-tree", "--write-tree", "--name-only", "--no-messages", stand_in, commit)
    lines = out.splitlines()
    if status == 0:
        return lines[0], []
    if status == 1:
        return None, sorted(set(lines[1:])) or ["(unknown)"]
    raise FatalError(f"git merge-tree failed on {commit[:12]}")


def _commit_tree(git: Git, tree: str, parent: str, original: str, committer: tuple[str, str] | None = None) -> str:
    message = git.run("log", "-1", "--format=%B", original).encode()
    env = dict(
        zip(
            ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE"),
            git.run("log", "-1", "--format=%an%x00%ae%x00%aI", original).split("\0"),
            strict=True,
        )
    )
    if committer:
        env.update(GIT_COMMITTER_NAME=committer[0], GIT_COMMITTER_EMAIL=committer[1])
    return git.as_sglpatch().with_env(**env).run_with_input(["commit-tree", tree, "-p", parent], message)
