"""Where a rebase in progress stands: .git/sglpatch-rebase/ in the target, read and written here.

`state.json` exists from the first write of a rebase to its last. Its "phase" says
which way an interrupted rebase goes (rebase/rebase_settle.py): "replaying" rolls back,
"installing" (the result is staged under `staged/`) goes forward. A rebase stopped
for the user (a conflict, a failing check, an error such as a failed download) has
"stopped" set: only `--continue` or `--abort` settle it. Every file is written
durably, and the folder is renamed away before it is deleted, so a half-deleted
one is never read. `RebaseState` is the file's one type: `load` checks it (what
rolling back needs, or the file is corrupt; what going on needs, or --continue is
refused) and `save` writes it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.safety.durable import write_durably
from sglpatch.safety.run_mark import RunMark
from sglpatch.targets._record_file import load_json_record
from sglpatch.targets.checkout_record import CheckoutRecord
from sglpatch.targets.target import Target

STATE_DIR = "sglpatch-rebase"
DELETING = STATE_DIR + ".deleting"  # the state folder on its way out: never read as a rebase in progress
SERIES_REF = "refs/sglpatch/rebase/series"
REPLAYING, INSTALLING = "replaying", "installing"
STAGED_SERIES, STAGED_REPORT = "staged/series", "staged/report.txt"


class StopKind(StrEnum):
    CONFLICT = "conflict"  # the patch did not merge: resolve, `git add`, continue
    CHECK = "failing check"  # the prefix ending at the patch does not compile or import: amend, continue
    ERROR = "error"  # anything else (a failed download, a git failure): fix the cause, continue


@dataclass(frozen=True)
class Stop:
    """Why a rebase waits for the user: the state's "stopped" object, one type for its three kinds."""

    kind: StopKind
    patch: str  # the patch it stopped at ("the end (writing the result)" for an error after the last)
    head: str | None = None  # HEAD when it stopped: what --continue builds on
    files: list[str] = field(default_factory=list)  # conflict: unmerged files; check: the files checked
    upstream: str | None = None  # conflict: why the patch may already be upstream
    problem: str = ""  # check: what failed; error: the error
    recheck: bool = False  # error: the patch was recorded but its check had not passed yet

    @classmethod
    def from_json(cls, data) -> Stop:
        if not (isinstance(data, dict) and isinstance(data.get("patch"), str)):
            raise ValueError("stopped is not a patch record")
        if "check" in data:
            return cls(StopKind.CHECK, data["patch"], data.get("head"), data.get("files", []), problem=data["check"])
        if "error" in data:
            return cls(
                StopKind.ERROR,
                data["patch"],
                data.get("head"),
                problem=data["error"],
                recheck=data.get("recheck", False),
            )
        return cls(StopKind.CONFLICT, data["patch"], data.get("head"), data.get("files", []), data.get("upstream"))

    def to_json(self) -> dict:
        if self.kind == StopKind.CHECK:
            return {"patch": self.patch, "files": self.files, "check": self.problem, "head": self.head}
        if self.kind == StopKind.ERROR:
            return {"patch": self.patch, "error": self.problem, "head": self.head, "recheck": self.recheck}
        return {"patch": self.patch, "files": self.files, "upstream": self.upstream, "head": self.head}

    @property
    def recorded(self) -> bool:
        """Its patch's commit is made and recorded: a stop on the patch's check, or an error after the record."""
        return self.kind == StopKind.CHECK or self.recheck

    def describe(self) -> str:
        why = "conflict" if self.kind == StopKind.CONFLICT else f"{self.kind}: {self.problem}"
        return f"a rebase is stopped at {self.patch} ({why})"


OUTCOME_KEYS = ("patch", "outcome", "detail")
DROPPED = "dropped"  # the outcome of a patch the user left out (--drop)


@dataclass(frozen=True)
class PatchResult:
    """What the rebase did with one patch: the state's "outcomes" entries, in series order."""

    patch: str
    outcome: str  # clean / merged with changes / conflict, resolved by hand / upstream / dropped
    detail: str = ""

    @property
    def kept(self) -> bool:
        """Whether the rebased series holds the patch (an upstream patch dropped on request, or one the user
        dropped, is not in it)."""
        return self.outcome != DROPPED and not self.detail.endswith("; dropped")

    def line(self) -> str:
        return f"{self.patch}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")

    @classmethod
    def from_json(cls, data) -> PatchResult:
        if not (isinstance(data, dict) and all(isinstance(data.get(k), str) for k in OUTCOME_KEYS)):
            raise ValueError("an outcome is not a patch record")
        return cls(data["patch"], data["outcome"], data["detail"])

    def to_json(self) -> dict:
        return {"patch": self.patch, "outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True)
class InstallPlan:
    """The staged result a rebase in phase "installing" puts in place (the state's "install" object)."""

    files: list[str]  # the series folder's new files, staged under staged/series/
    series_digest: str | None  # the series folder's digest once they are in place
    report: str | None  # where the range-diff goes (its text is staged/report.txt)
    record: CheckoutRecord  # the checkout record of the rebased branch
    replaces: list[str] = field(default_factory=list)  # the patches the folder's old series listed (only they go)

    @classmethod
    def from_json(cls, plan) -> InstallPlan:
        if not isinstance(plan, dict) or not isinstance(plan.get("files"), list):
            raise ValueError("install has no file list")
        if not all(isinstance(n, str) and n and Path(n).name == n and not n.startswith(".") for n in plan["files"]):
            raise ValueError("install names a file that is not a plain name")
        record = plan.get("record")
        if not (isinstance(record, dict) and isinstance(record.get("head"), str)):
            raise ValueError("install has no checkout record")
        if not (plan.get("report") is None or isinstance(plan["report"], str)):
            raise ValueError("install's report is not a path")
        digest = plan.get("series_digest")
        replaces = plan.get("replaces", [])
        if not (isinstance(replaces, list) and all(isinstance(n, str) and Path(n).name == n for n in replaces)):
            raise ValueError("install's replaced patches are not plain names")
        return cls(
            plan["files"],
            digest if isinstance(digest, str) else None,
            plan.get("report"),
            CheckoutRecord.from_json(record),
            replaces,
        )

    def to_json(self) -> dict:
        return {
            "files": self.files,
            "series_digest": self.series_digest,
            "report": self.report,
            "record": self.record.to_json(),
            "replaces": self.replaces,
        }


@dataclass
class RebaseState:
    """`state.json`: one rebase in progress. Loaded, checked and saved only here (`load`, `save`).

    The first five fields are what rolling back reads; they are None only in a state cut short before its
    first save (`begun` is False: nothing else was written yet). The fields from `base` on are what
    --continue and finishing read; `unfit` says why a state (one an older sglpatch wrote, say) lacks them."""

    original: str | None = None  # the branch (or commit) the rebase began on
    original_head: str | None = None
    backup: str | None = None  # the ref HEAD is saved under
    onto: str | None = None  # ONTO's commit
    onto_name: str | None = None  # ONTO as the user named it
    phase: str = REPLAYING
    backup_made: bool = False  # whether this rebase made the backup ref (rolling back deletes it then)
    release: str | None = None  # the sglang release ONTO is (None: not a named release)
    base: str | None = None  # the pinned base the series was made into commits on
    patch_dir: str | None = None
    report_dir: str | None = None
    series_digest: str | None = None  # the series folder when the rebase began
    drop_upstreamed: bool | None = None
    check_imports: bool = False
    patches: list[str] | None = None  # the series' patch names, in order
    commits: list[str] | None = None  # each patch as a commit on `base`
    next: int | None = None  # the index of the next patch to replay
    checked: int | None = None  # patches before this index passed their prefix check
    outcomes: list[PatchResult] | None = None
    dropped: list[str] = field(default_factory=list)  # patches the user asked to leave out (--drop)
    stopped: Stop | None = None  # why the rebase waits for the user; None while it runs
    resolved_by_hand: bool = False  # a conflict was resolved (or a commit amended) by the user
    install: InstallPlan | None = None  # the staged result, once phase is "installing"
    out_dir: str | None = None  # a line's rebase writes the new line here (None: rewrite patch_dir)
    out_digest: str | None = None  # out_dir when the rebase began (empty: a new line)
    tags_made: list[str] = field(default_factory=list)  # the release tags it made in the checkout (rolled back)
    run: RunMark | None = None  # the run that saved it last (the git locks a killed run left are its own)
    aborting: bool = False  # an --abort of the stopped rebase began (run again, it settles what that one left)
    dropping: bool = False  # a --drop of the stopped patch began (run again, it removes the git locks that one left)
    orig_head: str | None = None  # ORIG_HEAD when the --abort (or --drop) began: a kill inside its git can move it
    unfit: str | None = None  # why --continue cannot go on from this state (not saved)

    @property
    def begun(self) -> bool:
        return self.original is not None

    @property
    def series_out_dir(self) -> Path:
        """Where the rebased series is written: a new line's folder, else the source folder itself."""
        return Path(self.out_dir or self.patch_dir)

    def describe_stop(self) -> str:
        return self.stopped.describe()

    @classmethod
    def from_json(cls, data) -> RebaseState:
        """Raise ValueError unless `data` has what rolling back (and, once installing, finishing) reads."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        _check_fields(data, _REQUIRED)
        phase = data.get("phase", REPLAYING)  # states written before phases existed were replaying
        if phase not in (REPLAYING, INSTALLING):
            raise ValueError(f"unknown phase {phase!r}")
        stopped = Stop.from_json(data["stopped"]) if data.get("stopped") else None
        install = None
        if phase == INSTALLING:
            _check_fields(data, {"patch_dir": str, "series_digest": str})
            install = InstallPlan.from_json(data.get("install"))
        unfit = _why_not_continuable(data)

        def typed(key: str, kind: type, default=None):
            value = data.get(key, default)
            return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else default

        return cls(
            **{key: data[key] for key in _REQUIRED},
            phase=phase,
            backup_made=typed("backup_made", bool, False),
            release=typed("release", str),
            base=typed("base", str),
            patch_dir=typed("patch_dir", str),
            report_dir=typed("report_dir", str),
            series_digest=typed("series_digest", str),
            drop_upstreamed=typed("drop_upstreamed", bool),
            check_imports=typed("check_imports", bool, False),
            patches=typed("patches", list),
            commits=typed("commits", list),
            next=typed("next", int),
            checked=typed("checked", int),
            outcomes=None if unfit else [PatchResult.from_json(o) for o in data["outcomes"]],
            dropped=[n for n in typed("dropped", list, []) if isinstance(n, str)],
            stopped=stopped,
            resolved_by_hand=typed("resolved_by_hand", bool, False),
            install=install,
            out_dir=typed("out_dir", str),
            out_digest=typed("out_digest", str),
            tags_made=[n for n in typed("tags_made", list, []) if isinstance(n, str) and n and not n.startswith("-")],
            run=_run_mark(data.get("run")),
            aborting=typed("aborting", bool, False),
            dropping=typed("dropping", bool, False),
            orig_head=typed("orig_head", str),
            unfit=unfit,
        )

    def to_json(self) -> dict:
        """The saved object: unset fields (None, and the flags and lists at their defaults) are left out."""
        data: dict = {}
        for name in _SAVED:
            value = getattr(self, name)
            if value is None or (
                name in ("dropped", "resolved_by_hand", "tags_made", "aborting", "dropping") and not value
            ):
                continue
            if name == "outcomes":
                value = [o.to_json() for o in value]
            elif name in ("stopped", "install", "run"):
                value = value.to_json()
            data[name] = value
        return data


# What rolling back reads; a state missing anything else can still be aborted or recovered.
_REQUIRED = {"original": str, "original_head": str, "backup": str, "onto": str, "onto_name": str}
# What --continue and finishing read.
_REQUIRED_TO_GO_ON = {
    "base": str,
    "patch_dir": str,
    "report_dir": str,
    "series_digest": str,
    "patches": list,
    "commits": list,
    "next": int,
    "outcomes": list,
    "drop_upstreamed": bool,
}
_SAVED = [f.name for f in fields(RebaseState) if f.name != "unfit"]


def state_dir(git: Git) -> Path:
    return git.git_dir() / STATE_DIR


def save(folder: Path, state: RebaseState) -> None:
    state.run = RunMark.current()
    write_durably(folder / "state.json", json.dumps(state.to_json(), indent=2).encode(), fault_points=False)


def _run_mark(data) -> RunMark | None:
    """The run that saved a state; None for a state an older sglpatch wrote (its locks count as not ours)."""
    try:
        return RunMark.from_json(data) if data is not None else None
    except ValueError:
        return None


def remove_state_folder(folder: Path) -> None:
    """Rename, then delete: a kill inside the delete leaves DELETING, which nothing reads."""
    gone = folder.with_name(DELETING)
    if gone.exists():
        shutil.rmtree(gone)
    folder.rename(gone)
    shutil.rmtree(gone)


def load(folder: Path) -> RebaseState | None:
    """The state of the rebase in progress; None when there is none. A folder without state.json was cut
    short before its first save, so nothing else was written yet: a state that has not `begun` says so."""
    if not folder.is_dir():
        return None
    path = folder / "state.json"
    if not path.is_file():
        return RebaseState()
    advice = f"check out your branch by hand (its HEAD is also under refs/sglpatch/backup/), then delete {folder}"
    return load_json_record(path, RebaseState.from_json, advice)


def _why_not_continuable(data: dict) -> str | None:
    """What --continue would lack in `data` (e.g. a state written by an older sglpatch), or None."""
    try:
        _check_fields(data, _REQUIRED_TO_GO_ON)
        if not (data.get("release") is None or isinstance(data["release"], str)):
            raise ValueError("release is not a version")
        if len(data["patches"]) != len(data["commits"]) or not 0 <= data["next"] <= len(data["commits"]):
            raise ValueError("patches, commits and next do not agree")
        for outcome in data["outcomes"]:
            PatchResult.from_json(outcome)
    except ValueError as exc:
        return str(exc)
    return None


def check_can_go_on(state: RebaseState, folder: Path, root: Path) -> None:
    """Refuse --continue on a state that lacks what the replay reads (e.g. one written by an older sglpatch)."""
    if state.unfit:
        raise FatalError(
            f"{folder / 'state.json'} cannot be continued ({state.unfit}); {hints.abort_rebase(root)} and start again"
        )


def _check_fields(state: dict, expected: dict) -> None:
    for key, kind in expected.items():
        value = state.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{key} is missing or not a {kind.__name__}")


def refuse_in_progress(target: Target) -> None:
    """Refuse to work on a checkout with a rebase in progress, saying how to settle it."""
    state = load(state_dir(target.git))
    if state is None:
        return
    if state.stopped:
        raise FatalError(
            f"{state.describe_stop()} in {target.root}; finish it ({hints.continue_rebase(target.root)}) "
            f"or undo it ({hints.abort_rebase(target.root)}) first"
        )
    raise FatalError(
        f"a rebase of {target.root} was interrupted; run {hints.recover(target.root)} to finish or undo it"
    )


def refuse_one_in_another_worktree(target: Target) -> None:
    """Before a new rebase: refuse while a rebase is in progress in another worktree of the repository. The
    rebases of all its worktrees share the series ref (SERIES_REF, under refs/, which git does not keep per
    worktree): one that finishes or is undone deletes it, and the other's --continue then fails at its range-diff
    for ever, leaving only --abort, which drops the user's resolution."""
    git = target.git
    common, here = git.common_dir(), git.git_dir()
    linked = sorted((common / "worktrees").glob("*")) if (common / "worktrees").is_dir() else []
    for git_dir in [common, *linked]:
        if git_dir == here or not (git_dir / STATE_DIR).is_dir():
            continue
        where = _worktree_of(git, git_dir)
        if not os.path.isdir(where):  # deleted without `git worktree remove`: its rebase can never go on
            raise FatalError(
                f"a rebase is in progress in {where}, another worktree of this repository whose folder is gone, and "
                f"the rebases of one repository share {SERIES_REF}; nothing was changed: if that folder is gone for "
                f"good, `git -C {shlex.quote(str(target.root))} worktree prune` forgets it and its rebase, then run "
                "this again"
            )
        raise FatalError(
            f"a rebase is in progress in {where}, another worktree of this repository, and the rebases of one "
            f"repository share {SERIES_REF}; nothing was changed: settle that one first ({hints.continue_rebase(where)}"
            f", {hints.abort_rebase(where)} or {hints.recover(where)}), then run this again"
        )


def _worktree_of(git: Git, git_dir: Path) -> str:
    """The work tree whose git dir is `git_dir`: a linked one's `gitdir` file names its `.git` file (relative to
    `git_dir` where git writes relative paths); the main one is the first `git worktree list` names."""
    if (git_dir / "gitdir").is_file():
        named = os.fsdecode((git_dir / "gitdir").read_bytes().rstrip(b"\n"))
        return os.path.normpath(git_dir / named).removesuffix("/.git")
    listed = git.run_bytes("worktree", "list", "--porcelain", "-z").split(b"\0")
    return os.fsdecode(listed[0].removeprefix(b"worktree "))
