"""The branches `sglpatch pr` sends upstream: on what base, with which commits and messages.

A PR branch is made on a base that shares upstream's history: a clone of sgl-project/sglang,
on its remote's `main` or the ref named. The line's patches are made into commits on the
line's release (the clone's tag, else the line's default base, built from the wheel), then
each group's patches are carried onto the base with the replay engine that `make rebase` and
`make drift` use (`replay.carry_patches`): clean, 3-way, or a conflict, which stops the whole
run before any ref is written. A base whose history holds a wheel import
(`releases.imported_release`) renders bodies only: it cannot be submitted.

The commits carry the patch text and an upstream-style message: the subject, and the body
without the paragraphs that only make sense for a carried patch ("Upstream:", where it stands
upstream; "Drop when:", when the series can drop it) and without the project's own trailers
(PROJECT_TRAILERS); any other trailer (Signed-off-by, Co-authored-by) stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.output import say
from sglpatch.pin import Pin
from sglpatch.rebase.default_base import drift_from_pin
from sglpatch.rebase.releases import imported_release
from sglpatch.rebase.replay import Landing, SeriesCommits, carry_patches, describe, history_between, series_commits
from sglpatch.series import Patch
from sglpatch.upstream.pr_body import Group

PROJECT_TRAILERS = ("patch-group", "drop-when", "tests", "extends-pr", "upstream-pr", "upstream-marker", "prior-art")
CARRIED_ONLY_PARAGRAPHS = ("Upstream:", "Drop when:")
UPSTREAM_CLONE = "https://github.com/sgl-project/sglang"
_TRAILER_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): ")


@dataclass
class PrBase:
    """The commit the PR branches are built on, how it was named, and the wheel release it was imported
    from (None for a base with upstream's history)."""

    name: str
    commit: str
    imported: str | None

    def label(self, git: Git) -> str:
        described = git.run("describe", "--tags", "--always", self.commit)
        return self.name if described == self.name else f"{self.name} ({described})"


def upstream_message(patch: Patch) -> str:
    """The commit message a PR carries for `patch` (see the module docstring)."""
    paragraphs = [p for p in re.split(r"\n\s*\n", patch.body.strip()) if p.strip()]
    if patch.trailers and paragraphs:
        kept = [
            line
            for line in paragraphs[-1].splitlines()
            if not ((m := _TRAILER_LINE.match(line.strip())) and m.group(1).lower() in PROJECT_TRAILERS)
        ]
        paragraphs[-1:] = ["\n".join(kept)] if kept else []
    body = [p for p in paragraphs if not p.lstrip().startswith(CARRIED_ONLY_PARAGRAPHS)]
    return "\n\n".join([patch.subject, *body]) + "\n"


def resolve_base(git: Git, onto: str | None, pin: Pin, upstream: str) -> PrBase:
    """ONTO when given; else `main` of the remote that points at `upstream` (or of origin); else the pin's tag."""
    name = onto or _remote_main(git, upstream) or pin.base_rev
    commit = git.rev_parse(f"{name}^{{commit}}")
    if commit is None:
        raise FatalError(f"{name} is not a commit in {git.workdir} (ONTO= names the upstream ref to build on)")
    return PrBase(name, commit, imported_release(git, commit))


def _remote_main(git: Git, upstream: str) -> str | None:
    remotes = git.run("remote").split()
    pointing = [r for r in remotes if upstream.lower() in git.run("remote", "get-url", r).lower()]
    for remote in [*pointing, "origin"]:
        if remote in remotes and git.rev_parse(f"refs/remotes/{remote}/main"):
            return f"{remote}/main"
    return None


def imported_note(base: PrBase) -> str:
    """The one line a dry run on an imported base prints."""
    return (
        f"note: {base.name} is sglang {base.imported} imported from its PyPI wheel, which shares no history with "
        f"upstream: these branches show the bodies but cannot be submitted; for branches that can, clone "
        f"{UPSTREAM_CLONE} and run make pr SGLANG=<clone> ONTO=origin/main"
    )


def refuse_imported(base_name: str, release: str) -> FatalError:
    return FatalError(
        f"--submit needs a base with upstream's history, and {base_name} is sglang {release} imported from its "
        f"PyPI wheel (no commit in common with upstream); clone {UPSTREAM_CLONE} and run make pr SGLANG=<clone> "
        "ONTO=origin/main FORK=<your fork> SUBMIT=1; nothing was pushed"
    )


class ReleaseCommits:
    """The line's patches as commits on its release, with upstream messages, in a workspace that also sees
    the clone's objects; `carry` puts a group's patches onto a base there."""

    def __init__(self, git: Git, patches: list[Patch], pin: Pin, default_base, committer):
        self.git = git
        self.committer = committer
        if git.rev_parse(pin.base_rev) and not drift_from_pin(git, pin.base_rev, pin):
            source, extra, base = git, [], pin.base_rev
        else:  # no such tag in the clone, or not the pinned files: the release as the wheel has it
            source, extra, base = Git(default_base()), [git.common_dir() / "objects"], pin.tag
        self.commits: SeriesCommits = series_commits(
            source,
            base,
            patches,
            f"the line at {pin.tag}",
            committer=committer,
            message_of=upstream_message,
            extra_objects=extra,
        )
        self.by_name = dict(zip((p.name for p in patches), self.commits.commits, strict=True))

    def carry(self, group: Group, onto: str, base: PrBase) -> str:
        """The group's patches on commit `onto`, patch by patch as `make rebase` reports them; the tip.
        A conflict raises (nothing is written outside the workspace)."""
        workspace = self.commits.workspace.git
        history = history_between(workspace, self.commits.base, base.commit)
        pairs = [(patch, self.by_name[patch.name]) for patch in group.patches]
        outcomes, tip = carry_patches(workspace, pairs, onto, history, self.committer, stop_at_conflict=True)
        for outcome in outcomes:
            say(f"  {describe(outcome)}")
        conflict = next((o for o in outcomes if o.kind == Landing.CONFLICT), None)
        if conflict:
            raise FatalError(
                f"{group.id}: {conflict.patch.name} conflicts on {base.name}: {'; '.join(conflict.hunks)}; no branch "
                f"was made: resolve it with make rebase SGLANG=<clone> ONTO={base.name} (it stops there; CONTINUE=1 "
                "once resolved), update the line's patch from the result, then run make pr again"
            )
        return tip

    def copy_to(self, tip: str, ref: str) -> None:
        self.commits.workspace.copy_commit_to(tip, self.git, ref)

    def close(self) -> None:
        self.commits.workspace.close()
