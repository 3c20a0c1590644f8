"""A rebase in progress, as it stands on disk, and the two ways to settle it.

`.git/sglpatch-rebase/state.json` in the target exists from the first write of
a rebase to its last. Its "phase" says which way an interrupted rebase goes:

* "replaying": patches are being picked onto ONTO. Nothing the user owns has
  changed yet (the original branch never moves), so `roll_back` puts the
  checkout back exactly as it was.
* "installing": every patch is picked and the result (the series folder's new
  files, the range-diff, the checkout record) is staged under `staged/`.
  `install` finishes the job; every step of it is safe to run again.

A rebase stopped for the user (a conflict, a failing check) has "stopped" set:
that is not an interruption, and only `--continue` or `--abort` settle it.
While `install` rewrites the series folder it leaves REWRITE_MARKER in it, so a
kill there is seen by anyone loading that series, not only in the target.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sglpatch.checkout_record import STATE_FILE, write_state
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.interrupts import fault_point, write_phase
from sglpatch.series import REWRITE_MARKER
from sglpatch.series_writer import write_series_files
from sglpatch.target import Target

STATE_DIR = "sglpatch-rebase"
SERIES_REF = "refs/sglpatch/rebase/series"
REPLAYING, INSTALLING = "replaying", "installing"
STAGED_SERIES, STAGED_REPORT = "staged/series", "staged/report.txt"


def state_dir(git: Git) -> Path:
    return git.git_dir() / STATE_DIR


def save(folder: Path, state: dict) -> None:
    tmp = folder / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(folder / "state.json")


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


_REQUIRED = {"phase": str, "original": str, "original_head": str, "backup": str, "onto": str, "onto_name": str}
_REQUIRED_TO_INSTALL = {"install": dict, "patch_dir": str}


def _check_shape(state) -> None:
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    required = {**_REQUIRED, **(_REQUIRED_TO_INSTALL if state.get("phase") == INSTALLING else {})}
    for key, kind in required.items():
        if not isinstance(state.get(key), kind):
            raise ValueError(f"{key} is missing or not a {kind.__name__}")
    if state["phase"] not in (REPLAYING, INSTALLING):
        raise ValueError(f"unknown phase {state['phase']!r}")
    if state["phase"] == INSTALLING:
        plan = state["install"]
        if not (isinstance(plan.get("files"), list) and isinstance(plan.get("record"), dict)):
            raise ValueError("install is missing its files or record")
    if "stopped" in state and not (
        isinstance(state["stopped"], dict) and isinstance(state["stopped"].get("patch"), str)
    ):
        raise ValueError("stopped is not a patch record")


def refuse_in_progress(target: Target) -> None:
    """Refuse to work on a checkout with a rebase in progress, saying how to settle it."""
    state = load(state_dir(target.git))
    if state is None:
        return
    if state.get("stopped"):
        raise FatalError(
            f"{describe_stop(state)} in {target.root}; finish it (make rebase CONTINUE=1) "
            "or undo it (make rebase ABORT=1) first"
        )
    raise FatalError(
        f"a rebase of {target.root} was interrupted; run `sglpatch recover --sglang {target.root}` "
        f"(make recover SGLANG={target.root}) to finish or undo it"
    )


def describe_stop(state: dict) -> str:
    stopped = state["stopped"]
    why = f"failing check: {stopped['check']}" if "check" in stopped else "conflict"
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
    note = keep_hand_resolutions(target.git, state)
    with write_phase(f"the rebase was rolled back{note}: {target.root} is as it was"):
        roll_back(target.git, folder, state)
    return f"rolled back the interrupted rebase{note}; it is as it was"


def keep_hand_resolutions(git: Git, state: dict) -> str:
    """Conflicts the user resolved are their work: before a rollback, keep the commit that holds them."""
    if not state.get("resolved_by_hand") or "original" not in state:
        return ""
    head = git.run("rev-parse", "HEAD")
    kept = f"refs/sglpatch/backup/resolved-{head[:12]}"
    git.run("update-ref", kept, head)
    return f" (the conflicts you resolved are kept at {kept})"


def roll_back(git: Git, folder: Path, state: dict) -> None:
    """Undo a rebase that had not finished: the checkout, its refs and .git as before it began."""
    if state.get("phase") == INSTALLING:
        raise FatalError("the rebase had finished and was writing its result: `make recover` completes it")
    if "original" in state:
        if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
            git.try_run("cherry-pick", "--abort")
            fault_point("rebase rollback: cherry-pick aborted")
        git.run("checkout", "-q", "-f", state["original"])
        if git.run("rev-parse", "HEAD") != state["original_head"]:
            git.run("reset", "-q", "--hard", state["original_head"])
        fault_point("rebase rollback: back on the original branch")
        made = [SERIES_REF] + ([state["backup"]] if state.get("backup_made") else [])
        for ref in made:
            if git.rev_parse(ref):
                git.run("update-ref", "-d", ref)
                fault_point(f"rebase rollback: {ref} deleted")
    shutil.rmtree(folder)


def stage(folder: Path, state: dict, series_files: dict[str, bytes], report: tuple[str, str] | None, record: dict):
    """Write the result under staged/, then mark the rebase as installing: from here on it goes forward.

    `report` is (path, text) of the range-diff; `record` the checkout record of the rebased branch."""
    staged = folder / STAGED_SERIES
    staged.mkdir(parents=True, exist_ok=True)
    for name, data in series_files.items():
        (staged / name).write_bytes(data)
    if report is not None:
        (folder / STAGED_REPORT).write_text(report[1])
    state["install"] = {"files": list(series_files), "report": report[0] if report else None, "record": record}
    state["phase"] = INSTALLING
    save(folder, state)
    fault_point("rebase: result staged")


def install(target: Target, folder: Path, state: dict) -> None:
    """Put the staged result in place: branch, series folder, range-diff, checkout record. Safe to rerun."""
    git, plan = target.git, state["install"]
    patch_dir = Path(state["patch_dir"])
    if plan["files"]:
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
        tmp = report.with_name(f".{report.name}.tmp")
        shutil.copyfile(folder / STAGED_REPORT, tmp)
        tmp.replace(report)
        fault_point("rebase install: range-diff written")
    write_state(target, plan["record"])
    fault_point(f"rebase install: {STATE_FILE} written")
    if plan["files"]:
        (patch_dir / REWRITE_MARKER).unlink(missing_ok=True)
        fault_point("rebase install: series folder unmarked")
    if git.rev_parse(SERIES_REF):
        git.run("update-ref", "-d", SERIES_REF)
        fault_point("rebase install: series ref deleted")
    shutil.rmtree(folder)
