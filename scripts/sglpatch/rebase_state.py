"""A rebase in progress, as it stands on disk, and the two ways to settle it.

`.git/sglpatch-rebase/state.json` in the target exists from the first write of
a rebase to its last. Its "phase" says which way an interrupted rebase goes:

* "replaying": patches are being picked onto ONTO. Nothing the user owns has
  changed yet (the original branch never moves), so `roll_back` puts the
  checkout back exactly as it was.
* "installing": every patch is picked and the result (the series folder's new
  files, the range-diff, the checkout record) is staged under `staged/`.
  `install` finishes the job; every step of it is safe to run again.

A rebase stopped for the user (a conflict, a failing check, an error such as a
failed download) has "stopped" set: that is not an interruption, and only
`--continue` or `--abort` settle it. While `install` rewrites the series folder
it leaves REWRITE_MARKER in it, so a kill there is seen by anyone loading that
series, not only in the target. Every file here is written durably (fsync before
rename), so a power cut leaves the old bytes or the new, and the state folder is
renamed away before it is deleted, so a half-deleted one is never read.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sglpatch import hints
from sglpatch.checkout_record import STATE_FILE, write_state
from sglpatch.durable import fsync_dir, write_durably
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.interrupts import fault_point, write_phase
from sglpatch.series import REWRITE_MARKER
from sglpatch.series_writer import write_series_files
from sglpatch.target import Target

STATE_DIR = "sglpatch-rebase"
DELETING = STATE_DIR + ".deleting"  # the state folder on its way out: never read as a rebase in progress
SERIES_REF = "refs/sglpatch/rebase/series"
REPLAYING, INSTALLING = "replaying", "installing"
STAGED_SERIES, STAGED_REPORT = "staged/series", "staged/report.txt"


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


def _check_shape(state) -> None:
    """Raise ValueError unless `state` has what rolling back (and, once installing, finishing) reads."""
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    state.setdefault("phase", REPLAYING)  # states written before phases existed were replaying
    _check_fields(state, _REQUIRED)
    if state["phase"] not in (REPLAYING, INSTALLING):
        raise ValueError(f"unknown phase {state['phase']!r}")
    if "stopped" in state and not (
        isinstance(state["stopped"], dict) and isinstance(state["stopped"].get("patch"), str)
    ):
        raise ValueError("stopped is not a patch record")
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
    if not (isinstance(record, dict) and all(isinstance(record.get(k), str) for k in ("branch", "previous", "head"))):
        raise ValueError("install has no checkout record")
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
    stopped = state["stopped"]
    if "check" in stopped:
        why = f"failing check: {stopped['check']}"
    elif "error" in stopped:
        why = f"error: {stopped['error']}"
    else:
        why = "conflict"
    return f"a rebase is stopped at {stopped['patch']} ({why})"


def settle(target: Target, folder: Path, state: dict) -> str:
    """Finish or undo an interrupted rebase, with SIGINT/SIGTERM held; returns what was done and where it is."""
    if state.get("phase") == INSTALLING:
        branch = state["install"]["record"]["branch"]
        with write_phase(f"the rebase was finished: {target.root} is fully patched (branch {branch})"):
            install(target, folder, state)
        return (
            f"finished the interrupted rebase; it is fully patched (branch {branch}, rebased onto {state['onto_name']})"
        )
    with write_phase():
        note = keep_hand_resolutions(target.git, state)
    with write_phase(f"the rebase was rolled back{note}: {target.root} is as it was"):
        roll_back(target.git, folder, state)
    return f"rolled back the interrupted rebase{note}; it is as it was"


def keep_hand_resolutions(git: Git, state: dict) -> str:
    """Conflicts the user resolved (or commits amended after a failing check) are their work: before a
    rollback, keep the commit that holds them."""
    if not state.get("resolved_by_hand") or "original" not in state:
        return ""
    head = git.run("rev-parse", "HEAD")
    kept = f"refs/sglpatch/backup/resolved-{head[:12]}"
    git.run("update-ref", kept, head)
    return f" (the work you did by hand is kept at {kept})"


def roll_back(git: Git, folder: Path, state: dict) -> None:
    """Undo a rebase that had not finished: back on the original branch, the refs it made gone.

    The original branch is checked out as it is now: had the user moved it meanwhile, that stays."""
    if state.get("phase") == INSTALLING:
        raise FatalError(f"the rebase had finished and was writing its result: {hints.RECOVER} completes it")
    if "original" in state:
        if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
            git.try_run("cherry-pick", "--abort")
            fault_point("rebase rollback: cherry-pick aborted")
        git.run("checkout", "-q", "-f", state["original"])
        fault_point("rebase rollback: back on the original branch")
        made = [SERIES_REF] + ([state["backup"]] if state.get("backup_made") else [])
        for ref in made:
            if git.rev_parse(ref):
                git.run("update-ref", "-d", ref)
                fault_point(f"rebase rollback: {ref} deleted")
    remove_state_folder(folder)


def stage(folder: Path, state: dict, series_files: dict[str, bytes], report: tuple[str, str] | None, record: dict):
    """Write the result under staged/ (durably), then mark the rebase as installing: from here on it goes
    forward. `report` is (path, text) of the range-diff; `record` the checkout record of the rebased branch."""
    staged = folder / STAGED_SERIES
    staged.mkdir(parents=True, exist_ok=True)
    for name, data in series_files.items():
        write_durably(staged / name, data, fault_points=False)
    if report is not None:
        write_durably(folder / STAGED_REPORT, report[1].encode(), fault_points=False)
    for made in (staged.parent, folder):
        fsync_dir(made)
    state["install"] = {
        "files": list(series_files),
        "series_digest": folder_digest(_after_install(Path(state["patch_dir"]), series_files)),
        "report": report[0] if report else None,
        "record": record,
    }
    state["phase"] = INSTALLING
    save(folder, state)
    fault_point("rebase: result staged")


def _after_install(patch_dir: Path, series_files: dict[str, bytes]) -> dict[str, bytes]:
    """What the series folder will hold: its other files (pr-groups.json...), the new series files."""
    if not series_files:
        return folder_files(patch_dir)
    kept = {n: data for n, data in folder_files(patch_dir).items() if not n.endswith(".patch")}
    return {**kept, **series_files}


def install(target: Target, folder: Path, state: dict) -> None:
    """Put the staged result in place: branch, series folder, range-diff, checkout record. Safe to rerun."""
    git, plan = target.git, state["install"]
    patch_dir = Path(state["patch_dir"])
    _refuse_moved_head(git, plan["record"])
    if plan["files"] and not (patch_dir / REWRITE_MARKER).exists():
        _refuse_changed_series(patch_dir, (state["series_digest"], plan.get("series_digest")))
        (patch_dir / REWRITE_MARKER).write_text(f"{target.root}\n")
        fault_point("rebase install: series folder marked")
    branch = plan["record"]["branch"]
    if git.current_branch() != branch:
        git.run("checkout", "-q", *(() if git.rev_parse(f"refs/heads/{branch}") else ("-b",)), branch)
        fault_point("rebase install: branch made")
    if plan["files"]:
        staged = folder / STAGED_SERIES
        write_series_files(patch_dir, {name: (staged / name).read_bytes() for name in plan["files"]})
    if plan["report"]:
        report = Path(plan["report"])
        report.parent.mkdir(parents=True, exist_ok=True)
        write_durably(report, (folder / STAGED_REPORT).read_bytes(), fault_points=False)
        fault_point("rebase install: range-diff written")
    write_state(target, plan["record"])
    fault_point(f"rebase install: {STATE_FILE} written")
    if plan["files"]:
        (patch_dir / REWRITE_MARKER).unlink(missing_ok=True)
        fault_point("rebase install: series folder unmarked")
    if git.rev_parse(SERIES_REF):
        git.run("update-ref", "-d", SERIES_REF)
        fault_point("rebase install: series ref deleted")
    remove_state_folder(folder)


def folder_files(patch_dir: Path) -> dict[str, bytes]:
    """The series folder's own files: regular, not hidden, not a writer's leftover `.tmp`."""
    if not patch_dir.is_dir():
        return {}
    return {
        path.name: path.read_bytes()
        for path in sorted(patch_dir.iterdir())
        if path.is_file() and not path.is_symlink() and not path.name.startswith(".") and path.suffix != ".tmp"
    }


def folder_digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def series_digest(patch_dir: Path) -> str:
    """Every file of the series folder as it is now (pin.json, pr-groups.json and unlisted patches too)."""
    return folder_digest(folder_files(patch_dir))


def _refuse_changed_series(patch_dir: Path, expected: tuple[str, str | None]) -> None:
    """Unmarked, the folder holds the old series (install has not begun) or the new one (install is past
    unmarking it); anything else is someone's edit, which installing would overwrite."""
    if series_digest(patch_dir) not in expected:
        raise FatalError(
            f"{patch_dir} changed since the rebase began, and installing the result would overwrite that; "
            "put it back as it was (e.g. `git checkout -- patches/`) and run recover again"
        )


def _refuse_moved_head(git: Git, record: dict) -> None:
    """On a kill after staging, HEAD is detached at the rebased commit, or on the rebased branch made from
    it; anywhere else, someone moved it since, and finishing would build on the wrong commit."""
    branch, head = record["branch"], record["head"]
    if git.current_branch() == branch:
        return
    if git.run("rev-parse", "HEAD") != head or git.rev_parse(f"refs/heads/{branch}") not in (None, head):
        raise FatalError(
            f"HEAD (or branch {branch}) moved since the rebase was interrupted; to finish it, "
            f"`git checkout --detach {head[:12]}` (and delete {branch} if you made it), then run recover again"
        )
