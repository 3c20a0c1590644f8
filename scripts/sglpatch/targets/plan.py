"""Try the whole series against a target in a workspace, before writing anything.

First the longest prefix of the series that is already in the target: patches
1..k are applied when taking them back out, last one first, succeeds (a later
patch may edit lines an earlier one added, so each patch is only reversible
once the patches after it are out). Then each later patch, in order: already
applied (it reverse-applies), applies cleanly (then it is applied in the
workspace so the next patch sees it), or conflicts. The target's base, with the
applied patches taken back out, is compared with the pin.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from sglpatch import hints
from sglpatch.output import plural
from sglpatch.pin import Pin, drifted_files
from sglpatch.project import default_base_dir
from sglpatch.series import Patch, Series
from sglpatch.targets.target import Target, dirty_paths
from sglpatch.workspace import ApplyFailure, Workspace

ALREADY_APPLIED = "applied"
APPLIES_CLEANLY = "applies cleanly"
CONFLICTS = "conflicts"
NOT_TRIED = "not tried"  # after a patch that conflicts: it may need what that one would have added


@dataclass
class PatchState:
    patch: Patch
    state: str
    failure: ApplyFailure | None = None
    tree: str | None = None  # workspace tree after this patch, when it was applied there
    after: str | None = None  # NOT_TRIED: the patch that conflicts before it

    def describe(self) -> str:
        if self.failure:
            return f"{self.state}  ({self.failure.describe().split(': ', 1)[-1]})"
        return f"{self.state}  (after {self.after.split('-', 1)[0]}, which conflicts)" if self.after else self.state


@dataclass
class ApplyPlan:
    target: Target
    workspace: Workspace
    states: list[PatchState]
    drift: list[str]
    dirty: list[str] = field(default_factory=list)
    in_the_way: list[str] = field(default_factory=list)  # files the series creates that are there already
    outside_sparse: list[str] = field(default_factory=list)  # files it touches a sparse checkout leaves out

    @property
    def all_applied(self) -> bool:
        return all(s.state == ALREADY_APPLIED for s in self.states)

    @property
    def conflicts(self) -> list[PatchState]:
        return [s for s in self.states if s.state == CONFLICTS]

    @property
    def to_apply(self) -> list[PatchState]:
        return [s for s in self.states if s.state == APPLIES_CLEANLY]

    def refusal(self, release: str, three_way: bool) -> str | None:
        """Why apply would not write this plan (one line), or None when it would: for apply to raise and for
        status to say."""
        if self.in_the_way:
            kind = "untracked or git-ignored file" if self.target.is_git else "file"
            return (
                f"{self.target.local_path(self.in_the_way[0])} is there already ({kind}), and the series creates "
                "it; move it away first (apply would overwrite it, revert delete it); nothing was changed"
            )
        if self.outside_sparse:
            return (
                f"{self.target.root} is a sparse checkout that leaves out {plural(len(self.outside_sparse), 'file')}"
                f" the series changes ({', '.join(self.outside_sparse[:3])}); nothing was changed: add their "
                "folders (`git sparse-checkout add <folder>`) first"
            )
        if self.dirty:
            return (
                f"files the series touches have uncommitted changes: {', '.join(self.dirty)}; commit or stash them "
                "first"
            )
        if self.drift and not three_way:
            hint = f"; try {hints.option('--3way', 'THREEWAY=1')}" if self.target.is_git else ""
            return (
                f"base differs from the pin ({release}) in {plural(len(self.drift), 'file')}: "
                f"{', '.join(self.drift)}{hint}"
            )
        if self.conflicts:
            return f"{self.conflicts[0].failure.describe()}; nothing was changed"
        return None

    def close(self) -> None:
        self.workspace.close()

    def __enter__(self) -> "ApplyPlan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_workspace(target: Target, series: Series) -> Workspace:
    if target.is_git:
        base = default_base_dir() / ".git" / "objects"
        extra = [base] if base.is_dir() and base.resolve() != (target.git.common_dir() / "objects").resolve() else []
        return Workspace.from_git_target(target.git, extra_objects=extra)
    paths = series.touched_paths
    return Workspace.from_files(target.read_files(paths), target.executables(paths))


def make_plan(target: Target, series: Series, pin: Pin, three_way: bool = False) -> ApplyPlan:
    if not target.is_git:  # a package folder has no test tree: it takes the package part of each patch
        series = series.package_part()
    workspace = open_workspace(target, series)
    try:
        applied = _applied_prefix(workspace, series.patches)
        states = [PatchState(patch, ALREADY_APPLIED) for patch in series.patches[:applied]]
        for patch in series.patches[applied:]:
            blocked = next((s.patch.name for s in states if s.state == CONFLICTS), None)
            states.append(
                PatchState(patch, NOT_TRIED, after=blocked) if blocked else _try_patch(workspace, patch, three_way)
            )
        drift = drifted_files(pin, _base_blobs(target, series, states, list(pin.blobs)))
        dirty = dirty_paths(target, series.touched_paths) if target.is_git else []
        outside = outside_sparse_checkout(target, series.touched_paths) if target.is_git else []
    except BaseException:
        workspace.close()
        raise
    return ApplyPlan(target, workspace, states, drift, dirty, files_in_the_way(target, states), outside)


def outside_sparse_checkout(target: Target, paths: list[str]) -> list[str]:
    """The files of `paths` a sparse checkout leaves out of the work tree (git's skip-worktree bit)."""
    listed = target.git.run("ls-files", "-t", "-z", "--", *paths, strip=False)
    return [entry[2:] for entry in listed.split("\0") if entry.startswith("S ")]


def files_in_the_way(target: Target, states: list[PatchState]) -> list[str]:
    """Files the patches still to apply create that the target holds already: in a checkout an untracked or
    git-ignored file (git would overwrite it, and a revert delete it), in a package folder any file."""
    created = [p for s in states if s.state != ALREADY_APPLIED for p in s.patch.created_paths]
    return [p for p in dict.fromkeys(created) if os.path.lexists(target.local_path(p))]


def _applied_prefix(workspace: Workspace, patches: list[Patch]) -> int:
    """The largest k such that patches 1..k are in the workspace's tree; the tree is left as it was."""
    target_tree = workspace.git.run("write-tree")
    try:
        for k in range(len(patches), 0, -1):
            workspace.git.run("read-tree", target_tree)
            if not _modes_are_set(workspace, patches[:k]):
                continue
            if all(workspace.apply(patch, reverse=True) is None for patch in reversed(patches[:k])):
                return k
        return 0
    finally:
        workspace.git.run("read-tree", target_tree)


def _modes_are_set(workspace: Workspace, patches: list[Patch]) -> bool:
    """Whether the workspace's files have the modes `patches` give them (git apply -R ignores modes)."""
    modes = {path: mode for patch in patches for path, mode in patch.modes.items()}
    executable = workspace.executables(list(modes)) if modes else set()
    return all((path in executable) == (mode == "100755") for path, mode in modes.items())


def _try_patch(workspace: Workspace, patch: Patch, three_way: bool) -> PatchState:
    if workspace.applies(patch, reverse=True) and _modes_are_set(workspace, [patch]):
        return PatchState(patch, ALREADY_APPLIED)
    failure = workspace.apply(patch, three_way=three_way)
    if failure:
        return PatchState(patch, CONFLICTS, failure)
    return PatchState(patch, APPLIES_CLEANLY, tree=workspace.git.run("write-tree"))


def _base_blobs(target: Target, series: Series, states: list[PatchState], paths: list[str]) -> dict[str, str]:
    applied = [s.patch for s in states if s.state == ALREADY_APPLIED]
    with open_workspace(target, series) as base:
        for patch in reversed(applied):
            base.apply(patch, reverse=True)
        return base.blobs(paths)
