"""Where a rebase in progress stands: .git/sglpatch-rebase/ in the target, read and written here.

`state.json` exists from the first write of a rebase to its last. Its "phase" says
which way an interrupted rebase goes (rebase_settle.py): "replaying" rolls back,
"installing" (the result is staged under `staged/`) goes forward. A rebase stopped
for the user (a conflict, a failing check, an error such as a failed download) has
"stopped" set: only `--continue` or `--abort` settle it. Every file is written
durably, and the folder is renamed away before it is deleted, so a half-deleted
one is never read. The schema checks say what each reader needs.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from sglpatch import hints
from sglpatch.checkout_record import CheckoutRecord
from sglpatch.durable import write_durably
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.target import Target

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

    def describe(self) -> str:
        why = "conflict" if self.kind == StopKind.CONFLICT else f"{self.kind}: {self.problem}"
        return f"a rebase is stopped at {self.patch} ({why})"


def stop_of(state: dict) -> Stop | None:
    """Why the rebase in `state` waits for the user; None when it does not (it runs, or was interrupted)."""
    return Stop.from_json(state["stopped"]) if state.get("stopped") else None


def state_dir(git: Git) -> Path:
    return git.git_dir() / STATE_DIR


def save(folder: Path, state: dict) -> None:
    write_durably(folder / "state.json", json.dumps(state, indent=2).encode(), fault_points=False)


def remove_state_folder(folder: Path) -> None:
    """Rename, then delete: a kill inside the delete leaves DELETING, which nothing reads."""
    gone = folder.with_name(DELETING)
    if gone.exists():
        shutil.rmtree(gone)
    folder.rename(gone)
    shutil.rmtree(gone)


def load(folder: Path) -> dict | None:
    """The state of the rebase in progress; None when there is none. A folder without state.json was cut
    short before its first save, so nothing else was written yet: an empty state says so."""
    if not folder.is_dir():
        return None
    path = folder / "state.json"
    if not path.is_file():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        _check_shape(state)
        return state
    except (ValueError, UnicodeDecodeError) as exc:
        raise FatalError(
            f"{path} is corrupt ({exc}); check out your branch by hand (its HEAD is also under "
            f"refs/sglpatch/backup/), then delete {folder}"
        ) from None


OUTCOME_KEYS = ("patch", "outcome", "detail")
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


def series_out_dir(state: dict) -> Path:
    """Where the rebased series is written: a new line's folder (`out_dir`), else the source folder itself."""
    return Path(state.get("out_dir") or state["patch_dir"])


def _check_shape(state) -> None:
    """Raise ValueError unless `state` has what rolling back (and, once installing, finishing) reads."""
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    state.setdefault("phase", REPLAYING)  # states written before phases existed were replaying
    _check_fields(state, _REQUIRED)
    if state["phase"] not in (REPLAYING, INSTALLING):
        raise ValueError(f"unknown phase {state['phase']!r}")
    if "stopped" in state:
        Stop.from_json(state["stopped"])
    if state["phase"] == INSTALLING:
        _check_fields(state, {"patch_dir": str, "series_digest": str})
        _check_install_plan(state.get("install"))


def check_can_go_on(state: dict, folder: Path) -> None:
    """Refuse --continue on a state that lacks what the replay reads (e.g. one written by an older sglpatch)."""
    try:
        _check_fields(state, _REQUIRED_TO_GO_ON)
        if not (state.get("release") is None or isinstance(state["release"], str)):
            raise ValueError("release is not a version")
        if len(state["patches"]) != len(state["commits"]) or not 0 <= state["next"] <= len(state["commits"]):
            raise ValueError("patches, commits and next do not agree")
        for outcome in state["outcomes"]:
            if not (isinstance(outcome, dict) and all(isinstance(outcome.get(k), str) for k in OUTCOME_KEYS)):
                raise ValueError("an outcome is not a patch record")
    except ValueError as exc:
        raise FatalError(
            f"{folder / 'state.json'} cannot be continued ({exc}); {hints.ABORT_REBASE} and start again"
        ) from None


def _check_fields(state: dict, fields: dict) -> None:
    for key, kind in fields.items():
        value = state.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{key} is missing or not a {kind.__name__}")


def _check_install_plan(plan) -> None:
    if not isinstance(plan, dict) or not isinstance(plan.get("files"), list):
        raise ValueError("install has no file list")
    if not all(isinstance(n, str) and n and Path(n).name == n and not n.startswith(".") for n in plan["files"]):
        raise ValueError("install names a file that is not a plain name")
    record = plan.get("record")
    if not (isinstance(record, dict) and isinstance(record.get("head"), str)):
        raise ValueError("install has no checkout record")
    CheckoutRecord.from_json(record)
    if not (plan.get("report") is None or isinstance(plan["report"], str)):
        raise ValueError("install's report is not a path")


def refuse_in_progress(target: Target) -> None:
    """Refuse to work on a checkout with a rebase in progress, saying how to settle it."""
    state = load(state_dir(target.git))
    if state is None:
        return
    if state.get("stopped"):
        raise FatalError(
            f"{describe_stop(state)} in {target.root}; finish it ({hints.CONTINUE_REBASE}) "
            f"or undo it ({hints.ABORT_REBASE}) first"
        )
    raise FatalError(
        f"a rebase of {target.root} was interrupted; run {hints.recover(target.root)} to finish or undo it"
    )


def describe_stop(state: dict) -> str:
    return stop_of(state).describe()
