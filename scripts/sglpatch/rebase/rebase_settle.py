"""Settling a rebase that did not finish: roll it back while it replays, or install its staged result.

* "replaying": nothing the user owns has changed yet (the original branch never
  moves), so `roll_back` puts the checkout back exactly as it was.
* "installing": every patch is picked and the result (the series folder's new
  files, the range-diff, the checkout record) is staged under `staged/`;
  `install` finishes the job, and every step of it is safe to run again.

While `install` rewrites the series folder it leaves REWRITE_MARKER in it, so a
kill there is seen by anyone loading that series, not only in the target.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.git import NO_HOOKS, Git, GitFailed, blob_id, git_reason, shown_command, split_entries
from sglpatch.output import say
from sglpatch.rebase._series_digest import folder_digest, folder_files, own_files, series_digest
from sglpatch.safety.durable import fsync_dir, write_durably
from sglpatch.safety.interrupts import fault_point, write_phase
from sglpatch.series import REWRITE_MARKER
from sglpatch.series_writer import listed_patches, refuse_unlisted_in_the_way, write_series_files
from sglpatch.targets import RESERVE, STATE_FILE, CheckoutRecord, Target, write_record
from sglpatch.targets.rebase_store import (
    INSTALLING,
    SERIES_REF,
    STAGED_REPORT,
    STAGED_SERIES,
    InstallPlan,
    RebaseState,
    remove_state_folder,
    save,
)


def finish_or_roll_back(target: Target, folder: Path, state: RebaseState) -> str:
    """Finish or undo an interrupted rebase, with SIGINT/SIGTERM held; returns what was done and where it is."""
    if state.phase == INSTALLING:
        branch = state.install.record.branch
        with write_phase(f"the rebase was finished: {target.root} is fully patched (branch {branch})"):
            install(target, folder, state)
        return f"finished the interrupted rebase; it is fully patched (branch {branch}, rebased onto {state.onto_name})"
    with write_phase():
        note = keep_hand_resolutions(target.git, state)
    with write_phase(f"the rebase was rolled back{note}: {target.root} is as it was"):
        roll_back(target.git, folder, state)
    return f"rolled back the interrupted rebase{note}; it is as it was"


def keep_hand_resolutions(git: Git, state: RebaseState) -> str:
    """Conflicts the user resolved (or commits amended after a failing check) are their work: before a
    rollback, keep the commit that holds them."""
    if not state.resolved_by_hand or not state.begun:
        return ""
    head = git.run("rev-parse", "HEAD")
    kept = f"refs/sglpatch/backup/resolved-{head[:12]}"
    git.run("update-ref", kept, head)
    return f" (the work you did by hand is kept at {kept})"


def roll_back(git: Git, folder: Path, state: RebaseState) -> None:
    """Undo a rebase that had not finished: back on the original branch, the refs it made gone.

    The original branch is checked out as it is now: had the user moved it meanwhile, that stays. The room
    the rebase kept aside for this is freed first."""
    refuse_roll_back(git, state)
    _free_room(folder)
    if state.begun:
        if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
            with orig_head_kept(git):
                git.try_run(*git.sparse_as_it_is(), "cherry-pick", "--abort")
            fault_point("rebase rollback: cherry-pick aborted")
        if state.aborting:  # an --abort killed inside the block above left ORIG_HEAD as git's
            put_back_orig_head(git, state.orig_head)
        try:
            git.run(*NO_HOOKS, *git.sparse_as_it_is(), "checkout", "-q", "-f", state.original)
        except GitFailed:
            if not _back_on(git, state.original):  # a file git could not unlink but that holds the branch's bytes
                raise
        fault_point("rebase rollback: back on the original branch")
        _remove_files_a_cut_switch_left(git, state)
        made = [SERIES_REF] + ([state.backup] if state.backup_made else [])
        made += [f"refs/tags/{tag}" for tag in state.tags_made]
        for ref in made:
            if git.rev_parse(ref):
                git.run("update-ref", "-d", ref)
                fault_point(f"rebase rollback: {ref} deleted")
        _remove_emptied_ref_folders(git)
    remove_state_folder(folder)


def refuse_roll_back(git: Git, state: RebaseState) -> None:
    """Refuse, before anything is written, a roll-back that cannot be done or would write over a file of the
    user's."""
    if state.phase == INSTALLING:
        raise FatalError(
            f"the rebase had finished and was writing its result: {hints.recover(git.workdir)} completes it"
        )
    if state.begun:
        _refuse_untracked_in_the_way_back(git, state)


def _refuse_untracked_in_the_way_back(git: Git, state: RebaseState) -> None:
    """A file git does not track now (made while the rebase waited: ONTO dropped it, the user wrote one there) where
    the original branch has one: `git checkout -f` back would write over it without a word. One that holds the
    original's bytes (a switch cut short left it) is not in the way."""
    gone = git.paths("diff-tree", "-r", "--name-only", "--no-renames", "--diff-filter=D", state.original, "HEAD")
    there = [path for path in gone if os.path.lexists(Path(git.workdir) / path)]
    tracked = set(git.paths("ls-files")) if there else set()
    for path in there:
        local = Path(git.workdir) / path
        if path in tracked:
            continue
        if local.is_file() and not local.is_symlink():
            mine = local.read_bytes()  # the blob as git stores it, or as it writes it (eol settings, filters)
            written = (git.call(("cat-file", how, f"{state.original}:{path}")) for how in ("blob", "--filters"))
            if any(status == 0 and mine == theirs for status, theirs, _ in written):
                continue
        raise FatalError(
            f"{local} is not tracked now, and {state.original}, which the rebase goes back to, has a file there that "
            f"would be written over it; nothing was changed: move it aside ({hints.move_beside(local, set())}), "
            "then run this again"
        )


def _back_on(git: Git, original: str) -> bool:
    """HEAD on `original` (a branch, or the commit a detached HEAD was at), every tracked file as it has it."""
    at = git.current_branch() or git.rev_parse("HEAD")
    return at == original and not git.run("status", "--porcelain", "--untracked-files=no")


def tag_names(git: Git) -> set[str]:
    return set(git.run("for-each-ref", "--format=%(refname:strip=2)", "refs/tags/").split())


@contextmanager
def tags_removed_on_failure(git: Git, before: set[str]):
    """Before the rebase's state is saved (rolling it back removes them then): tags it made, for the releases
    it imported, go again if it stops."""
    try:
        yield
    except BaseException:
        for tag in sorted(tag_names(git) - before):
            git.run("update-ref", "-d", f"refs/tags/{tag}")
        raise


def _remove_emptied_ref_folders(git: Git) -> None:
    """git leaves the folders of the loose refs it deletes: those of sglpatch's own refs (refs/sglpatch/) that
    hold no ref any more go too."""
    top = git.common_dir() / "refs" / "sglpatch"
    folders = sorted((path for path in top.rglob("*") if path.is_dir()), key=lambda path: -len(path.parts))
    for folder in [*folders, top] if top.is_dir() else []:
        try:
            folder.rmdir()  # only an empty one
        except OSError:
            pass


@contextmanager
def orig_head_kept(git: Git):
    """ORIG_HEAD as it was before the block, after it: `git cherry-pick --abort` and `git reset --hard` move it,
    and the checkout's own ORIG_HEAD (the user's way back after their own reset or merge) is not the rebase's."""
    was = git.rev_parse("ORIG_HEAD")
    yield
    put_back_orig_head(git, was)


def put_back_orig_head(git: Git, was: str | None) -> None:
    if was is not None:
        git.run("update-ref", "--no-deref", "ORIG_HEAD", was)
    elif git.rev_parse("ORIG_HEAD") is not None:
        git.run("update-ref", "-d", "ORIG_HEAD")


def stage(
    folder: Path,
    state: RebaseState,
    series_files: dict[str, bytes],
    report: tuple[str, str] | None,
    record: CheckoutRecord,
):
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
    replaces = listed_patches(state.series_out_dir) if series_files else []
    state.install = InstallPlan(
        files=list(series_files),
        series_digest=folder_digest(own_files(_after_install(state.series_out_dir, series_files, replaces))),
        report=report[0] if report else None,
        record=record,
        replaces=replaces,
    )
    state.phase = INSTALLING
    save(folder, state)
    fault_point("rebase: result staged")


def _after_install(patch_dir: Path, series_files: dict[str, bytes], replaces: list[str]) -> dict[str, bytes]:
    """What the series folder will hold: its other files (pr-groups.json, a patch the old series did not list),
    the new series files."""
    kept = {n: data for n, data in folder_files(patch_dir).items() if n not in replaces}
    return {**kept, **series_files}


def install(target: Target, folder: Path, state: RebaseState) -> None:
    """Put the staged result in place: branch, series folder, range-diff, checkout record. Safe to rerun."""
    git, plan = target.git, state.install
    patch_dir = state.series_out_dir
    _refuse_moved_head(git, plan.record)
    if plan.files and not (patch_dir / REWRITE_MARKER).exists():
        _refuse_changed_series(patch_dir, (state.out_digest or state.series_digest, plan.series_digest))
    _free_room(folder)  # past the commit point there is no roll-back to keep it for
    if plan.files and not (patch_dir / REWRITE_MARKER).exists():
        patch_dir.mkdir(parents=True, exist_ok=True)  # a new line's folder
        (patch_dir / REWRITE_MARKER).write_bytes(os.fsencode(target.root) + b"\n")
        fault_point("rebase install: series folder marked")
    branch = plan.record.branch
    if git.current_branch() != branch:
        _switch_to(git, branch)
        fault_point("rebase install: branch made")
    if plan.files:
        staged = folder / STAGED_SERIES
        files = {name: (staged / name).read_bytes() for name in plan.files}
        refuse_unlisted_in_the_way(patch_dir, files, plan.replaces, then=f"run {hints.recover(target.root)}")
        write_series_files(patch_dir, files, plan.replaces)
    if plan.report:
        report = Path(plan.report)
        report.parent.mkdir(parents=True, exist_ok=True)
        write_durably(report, (folder / STAGED_REPORT).read_bytes(), fault_points=False)
        fault_point("rebase install: range-diff written")
    write_record(target, plan.record)
    fault_point(f"rebase install: {STATE_FILE} written")
    if plan.files:
        (patch_dir / REWRITE_MARKER).unlink(missing_ok=True)
        fault_point("rebase install: series folder unmarked")
    if git.rev_parse(SERIES_REF):
        git.run("update-ref", "-d", SERIES_REF)
        fault_point("rebase install: series ref deleted")
    _remove_emptied_ref_folders(git)
    remove_state_folder(folder)


def _switch_to(git: Git, branch: str) -> None:
    """HEAD onto the rebased branch (made here the first time). A post-checkout hook of the user's runs after git
    switched and its exit is git's: one that failed left the rebase cut short at its last step, saying only that
    the checkout failed; as apply does, that is a note, the switch done."""
    new = () if git.rev_parse(f"refs/heads/{branch}") else ("-b",)
    args = (*git.sparse_as_it_is(), "checkout", "-q", *new, branch)  # with patterns set, git rereads the tree
    status, _, err = git.try_run(*args)
    if status != 0 and git.current_branch() != branch:
        raise GitFailed(shown_command(git.workdir, args), status, err)
    if status != 0:
        say(f"note: git's post-checkout hook exited {status} after the switch to {branch} ({git_reason(err)})")


def _remove_files_a_cut_switch_left(git: Git, state: RebaseState) -> None:
    """A `git checkout` of ONTO (or a pick) that failed before moving HEAD (a full disk) leaves the files it
    created untracked, some only part-written, and `git checkout -f` back keeps them: remove each one that
    holds what ONTO (or the series) has there, or the start of it, and the folders that held only those."""
    kept = set(_tree_blobs(git, "HEAD"))
    made: dict[str, set[str]] = {}
    for commit in filter(None, [state.onto, state.commits[-1] if state.commits else None]):
        for path, blob in _tree_blobs(git, commit).items():
            if path not in kept:
                made.setdefault(path, set()).add(blob)
    root = git.workdir
    kept_dirs = {str(parent) for path in kept for parent in Path(path).parents}
    for path, blobs in sorted(made.items()):
        local = root / path
        if local.is_file() and not local.is_symlink() and _written_from(git, local.read_bytes(), blobs):
            local.unlink()
            for parent in Path(path).parents:
                if str(parent) in kept_dirs:
                    break
                try:
                    (root / parent).rmdir()
                except OSError:
                    break
    fault_point("rebase rollback: files of a cut switch removed")


def _written_from(git: Git, data: bytes, blobs: set[str]) -> bool:
    """Whether `data` is one of `blobs`, or the start of one (git's write of it was cut short)."""
    if blob_id(data) in blobs:
        return True
    return any(git.run_bytes("cat-file", "blob", blob).startswith(data) for blob in blobs)


def _tree_blobs(git: Git, commit: str) -> dict[str, str]:
    """Blob id of every file in `commit` ({} when the commit is not in the repository)."""
    status, listed, _ = git.call(("ls-tree", "-r", "-z", commit))
    if status != 0:
        return {}
    return {e.split("\t", 1)[1]: e.split()[2] for e in split_entries(listed)}


def _free_room(folder: Path) -> None:
    reserve = folder / RESERVE
    if reserve.exists():
        reserve.unlink()
        fault_point("rebase: room to roll back freed")


def _refuse_changed_series(patch_dir: Path, expected: tuple[str, str | None]) -> None:
    """Unmarked, the folder holds the old series (install has not begun) or the new one (install is past
    unmarking it); anything else is someone's edit, which installing would overwrite."""
    if series_digest(patch_dir) not in expected:
        raise FatalError(
            f"{patch_dir} changed since the rebase began, and installing the result would overwrite that; nothing "
            f"was changed: {hints.copy_aside(patch_dir)} keeps your edit, then put the folder back as it was "
            "(e.g. `git checkout -- patches/`) and run recover again"
        )


def _refuse_moved_head(git: Git, record: CheckoutRecord) -> None:
    """On a kill after staging, HEAD is detached at the rebased commit, or on the rebased branch made from
    it; anywhere else, someone moved it since, and finishing would build on the wrong commit."""
    branch, head = record.branch, record.head
    if git.current_branch() == branch:
        return
    if git.run("rev-parse", "HEAD") != head or git.rev_parse(f"refs/heads/{branch}") not in (None, head):
        raise FatalError(
            f"HEAD (or branch {branch}) moved since the rebase was interrupted; to finish it, "
            f"`git checkout --detach {head[:12]}` (and delete {branch} if you made it), then run recover again"
        )
