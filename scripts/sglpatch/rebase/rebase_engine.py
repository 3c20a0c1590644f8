"""The rebase engine: carry the series onto a newer sglang in a git checkout.

The series (from patches/) is made into commits on the pinned base; for each
patch in order the replay engine (`replay.land`, which drift uses too) says how
it lands on ONTO (clean / merged with changes / conflict / already upstream),
then it is cherry-picked in the checkout with git's 3-way merge and rename
detection. A conflict stops with the conflict in the work tree; `resume` goes on
after the user resolves it, `abort` puts back the branch, index and work tree as
they were. The original branch never moves; its HEAD is also saved under
refs/sglpatch/backup/ for as long as the rebase runs, and kept after success.
On success, patches/ is rewritten against ONTO (new pin), a range-diff of the
old and new series is written for reviewers, and the checkout records the
rebased branch like `apply` does (so a revert steps back to where the rebase
began). Ctrl-C, SIGTERM or a kill roll the rebase back, or, once the result is
staged, finish it: rebase_settle.py. Its state on disk: targets/rebase_store.py.
"""

from __future__ import annotations

import errno
import os
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from sglpatch import hints
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import NO_HOOKS, Git, GitFailed, disk_full, error_line, git_reason
from sglpatch.output import progress, say
from sglpatch.pin import Pin, Wheel, load_pin, pinned_kind
from sglpatch.project_kind import ProjectKind
from sglpatch.rebase import rebase_settle
from sglpatch.rebase._prefix_checks import compile_error, import_error
from sglpatch.rebase._series_digest import series_digest
from sglpatch.rebase.releases import release_commit, release_date, release_of
from sglpatch.rebase.replay import Landing, describe, history_between, land, picture, series_commits
from sglpatch.safety.interrupts import fault_point, write_phase
from sglpatch.series import Series, load_series
from sglpatch.series_writer import listed_patches, refuse_unlisted_in_the_way, render_series
from sglpatch.targets import (
    RESERVE,
    CheckoutRecord,
    Target,
    current_record,
    make_reserve,
    rebase_store,
    refuse_commits_past_the_series,
    remove_locks_of_a_cut_run,
    room_to_switch_back,
)
from sglpatch.targets.rebase_store import DROPPED, REPLAYING, SERIES_REF, PatchResult, RebaseState, Stop, StopKind, save
from sglpatch.wheels import fetch_wheel, file_sha256

MERGED = "merged with changes"
RESOLVED = "conflict, resolved by hand"
LEFT_OUT = "left out by hand"


class Stopped(FatalError):
    """The rebase stopped for the user (conflict, failing check); state is kept for --continue/--abort."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


@dataclass
class Request:
    """What a new rebase was asked to do (the command's options)."""

    onto: str
    release: str | None
    patch_dir: Path
    report_dir: Path
    drop_upstreamed: bool
    check_imports: bool
    drop: str | None = None  # patches to leave out: numbers or names, comma-separated
    lines_root: Path | None = None  # the source is a line: write the result as the line patches/v<release>/


@contextmanager
def _settled_if_interrupted(target: Target, folder: Path):
    """Ctrl-C / SIGTERM mid-rebase: roll it back (or finish it, once staged) before `guarded` reports."""
    try:
        yield
    except KeyboardInterrupt:
        with write_phase():  # a second Ctrl-C waits until this one is settled
            state = rebase_store.load(folder)
            if state is not None:
                rebase_settle.finish_or_roll_back(target, folder, state)
        raise


@contextmanager
def _stopped_on_error(target: Target, folder: Path):
    """Around the replay: an error that is not a stop (a failed download, a git failure) stops the rebase
    where it is, so that --continue retries once the cause is fixed; nothing done so far is lost."""
    try:
        yield
    except Stopped:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure mid-replay: stop rather than leave it unsettled
        if _disk_full(exc):
            raise  # a full disk: the caller rolls the rebase back, with the room it kept for that
        state = rebase_store.load(folder)
        if not (state and state.begun) or state.phase != REPLAYING or state.stopped:
            raise  # settled already, or a refusal of --continue: the rebase is as it was before this run
        why = str(exc) if isinstance(exc, FatalError) else f"{type(exc).__name__}: {exc}"
        index, checked = state.next, state.next if state.checked is None else state.checked
        recheck = checked < index  # the last patch was recorded, but its check had not passed yet
        names = state.patches + ["the end (writing the result)"]
        name = names[index - 1] if recheck else names[index]
        head = target.git.run("rev-parse", "HEAD")
        state.stopped = Stop(StopKind.ERROR, name, head, problem=why, recheck=recheck)
        with write_phase():
            save(folder, state)
        raise Stopped(
            f"{why}; the rebase is stopped at {name}: fix that, then {hints.continue_rebase(target.root)}, "
            f"or {hints.abort_rebase(target.root)} to put everything back"
        ) from None


@contextmanager
def _rolled_back_on_failure(target: Target, folder: Path, state: RebaseState):
    """Around the first writes: whatever stops them (a signal, a failed checkout, a full disk) undoes them."""
    try:
        yield
    except KeyboardInterrupt:
        with write_phase(f"the rebase was rolled back: {target.root} is as it was"):
            if folder.exists():
                rebase_settle.roll_back(target.git, folder, state)
        raise
    except (FatalError, OSError) as exc:
        raise _rolled_back(target, folder, state, _reason(exc)) from None


class DiskFull(FatalError):
    """A git step of the replay failed for want of space."""


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, DiskFull) or (isinstance(exc, GitFailed) and disk_full(exc.stderr))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"cannot write {exc.filename or 'the checkout'} ({os_reason(exc)})"
    return str(exc)


@contextmanager
def _rolled_back_on_disk_full(target: Target, folder: Path):
    """Around the replay of a new rebase: a full disk rolls it back (room for that was kept at its start),
    or, once its result is staged, says that recover finishes it when there is room again."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - only a full disk is handled here
        if not _disk_full(exc):
            raise
        state = rebase_store.load(folder)
        if state is None:
            raise
        if state.phase == rebase_store.INSTALLING:
            raise FatalError(
                f"{_reason(exc)}; the rebase's result is staged, not yet installed: free space, then run "
                f"{hints.recover(target.root)} to finish it"
            ) from None
        raise _rolled_back(target, folder, state, _reason(exc)) from None


def _rolled_back(target: Target, folder: Path, state: RebaseState, why: str) -> FatalError:
    """Undo a rebase that failed before its result was staged; the error that says where things stand."""
    try:
        with write_phase(f"the rebase was rolled back: {target.root} is as it was"):
            if folder.exists():
                rebase_settle.roll_back(target.git, folder, state)
    except (FatalError, OSError) as again:
        return FatalError(
            f"{why}; rolling the rebase back failed too ({_reason(again)}): free space or fix the cause, "
            f"then run {hints.recover(target.root)}"
        )
    return FatalError(f"{why}; the rebase was rolled back: {target.root} is as it was")


# -- starting ----------------------------------------------------------------------


def saved_state(target: Target) -> tuple[Path, RebaseState | None]:
    """The folder a rebase of `target` keeps its state in, and the state there (None: no rebase in progress)."""
    folder = rebase_store.state_dir(target.git)
    return folder, rebase_store.load(folder)


def refuse_in_progress(target: Target) -> None:
    """Before a new rebase: refuse one in progress (stopped, or cut short) here or in another worktree of the
    repository, saying how to settle it."""
    rebase_store.refuse_in_progress(target)
    rebase_store.refuse_one_in_another_worktree(target)


def start(target: Target, folder: Path, request: Request, series: Series, pin: Pin) -> int:
    """Begin a rebase of `target` (no rebase in progress there): the first writes, then the replay."""
    git = target.git
    if git.run("--no-optional-locks", "status", "--porcelain", "--untracked-files=no"):
        raise FatalError("the checkout has uncommitted changes; commit or stash them before rebasing")
    refuse_commits_past_the_series(target, current_record(target), "the rebase (it carries the series only)")
    if not pin.project.from_git:  # a DeepGEMM line's commits have no order by version
        _refuse_backwards(request.release or release_of(request.onto), pin)
    tags = rebase_settle.tag_names(git)  # a release imported here is tagged: gone again if the rebase is
    with rebase_settle.tags_removed_on_failure(git, tags):
        onto, release = _resolve_onto(git, request.onto, request.release, pin.project)
        _new_line_dir(request, release, request.patch_dir.resolve())  # refuse an existing line before any work
        _refuse_files_in_the_way(target, onto, request.onto, series)
        base = git.rev_parse(pin.base_rev) or _release_base(git, pin)
        commits = series_commits(git, base, series.patches)
    try:
        with rebase_settle.tags_removed_on_failure(git, tags):
            _show_picture(commits, series, onto, request.onto, history_between(git, base, onto))
            state = _new_state(git, request, series, base, onto, release, commits.commits)
            state.tags_made = sorted(rebase_settle.tag_names(git) - tags)
            room = room_to_switch_back(target, state.original_head, onto, series.touched_paths)
        with _rolled_back_on_failure(target, folder, state), write_phase():
            folder.mkdir()
            make_reserve(target, room, folder / RESERVE)
            save(folder, state)
            fault_point("rebase: state saved")
            commits.workspace.copy_commit_to(commits.commits[-1], git, SERIES_REF)
            fault_point("rebase: series ref made")
            git.run("update-ref", state.backup, state.original_head)
            fault_point("rebase: HEAD backed up")
            status, _, err = git.try_run(*NO_HOOKS, *git.sparse_as_it_is(), "checkout", "-q", "--detach", onto)
            if status != 0:
                raise FatalError(f"could not check out {request.onto} ({git_reason(err)})")
            if unwritten := git.paths("diff", "--name-only"):  # "unable to unlink old" still exits 0
                raise FatalError(
                    f"could not check out {request.onto} (git left {', '.join(unwritten)} not as committed: a file "
                    "it could not write, or a filter's change)"
                )
            fault_point("rebase: ONTO checked out")
        with (
            _rolled_back_on_disk_full(target, folder),
            _settled_if_interrupted(target, folder),
            _stopped_on_error(target, folder),
        ):
            progress(
                f"rebasing {len(series.patches)} patches onto {request.onto} ({onto[:12]}); "
                f"HEAD saved at {state.backup}"
            )
            return _replay(target, folder, state, series)
    finally:
        commits.workspace.close()


def _release_base(git: Git, pin: Pin) -> str:
    """The pinned release in a checkout that lacks its tag: made from the wheel (sglang); a DeepGEMM checkout
    must hold the pinned commit (a clone of deepseek-ai/DeepGEMM does)."""
    if pin.project.from_git:
        raise FatalError(
            f"{git.workdir} does not hold {pin.project.upstream} {pin.commit[:12]}, the line's pin: "
            f"`git fetch {pin.project.upstream_url}` there first; nothing was changed"
        )
    return release_commit(pin.release, git, fetch_wheel(pin.release, pin.wheel))


def _new_state(
    git: Git, request: Request, series: Series, base: str, onto: str, release: str | None, commits: list[str]
) -> RebaseState:
    head = git.run("rev-parse", "HEAD")
    backup = f"refs/sglpatch/backup/rebase-{head[:12]}"
    patch_dir = request.patch_dir.resolve()
    out_dir = _new_line_dir(request, release, patch_dir)
    return RebaseState(
        original=git.current_branch() or head,
        original_head=head,
        backup=backup,
        onto=onto,
        onto_name=request.onto,
        phase=REPLAYING,
        backup_made=git.rev_parse(backup) is None,
        release=release,
        base=base,
        patch_dir=str(patch_dir),
        report_dir=str(request.report_dir.resolve()),
        series_digest=series_digest(patch_dir),
        drop_upstreamed=request.drop_upstreamed,
        check_imports=request.check_imports,
        patches=[patch.name for patch in series.patches],
        commits=commits,
        next=0,
        outcomes=[],
        dropped=patches_named(request.drop, [patch.name for patch in series.patches]) if request.drop else [],
        out_dir=str(out_dir),
        out_digest=series_digest(out_dir),
    )


def _refuse_files_in_the_way(target: Target, onto: str, asked: str, series: Series) -> None:
    """A file HEAD does not track where ONTO or the series has one: git's checkout of ONTO and its cherry-picks
    overwrite a git-ignored file there (an untracked one stops them part-way), and the way back deletes it."""
    git = target.git
    listed = git.paths("diff", "--name-only", "--no-renames", "--diff-filter=A", "HEAD", onto)
    wanted = list(dict.fromkeys([*listed, *series.touched_paths]))
    tracked = set(git.paths("ls-tree", "-r", "--name-only", "HEAD", "--", *wanted))
    for path in wanted:
        if path not in tracked and os.path.lexists(target.local_path(path)):
            raise FatalError(
                f"{target.local_path(path)} is there already (untracked or git-ignored file), and the rebase onto "
                f"{asked} writes it; move it away first (the rebase would overwrite it, its way back delete it); "
                "nothing was changed"
            )


def _refuse_backwards(release: str | None, pin: Pin) -> None:
    """A rebase carries a series forward: onto a release older than its base, it would undo upstream's work."""
    if release and Version(release) < Version(pin.release):
        raise FatalError(
            f"sglang {release} is older than the series' base, sglang {pin.release}: a rebase carries a series "
            f"forward; rebase a line based at or below {release} (`sglpatch lines` lists them); nothing was changed"
        )


def _new_line_dir(request: Request, release: str | None, patch_dir: Path) -> Path:
    """A line's rebase writes a new line, patches/v<release>/, and leaves its own folder as it is."""
    if request.lines_root is None or release is None:
        return patch_dir
    out_dir = (request.lines_root / (release if pinned_kind(patch_dir).from_git else f"v{release}")).resolve()
    if out_dir.exists():
        raise FatalError(
            f"{out_dir} already holds a series line; a rebase writes the line for its new base, so move that "
            "folder away first (or rebase with --patches DIR to rewrite a folder in place); nothing was changed"
        )
    return out_dir


def _show_picture(commits, series: Series, onto: str, name: str, history: tuple[str, str] | None) -> None:
    """Every patch's state on ONTO before the first pick, from the replay drift makes (the same engine)."""
    outcomes = picture(commits, series, onto, history)
    say(f"the series on {name} ({onto[:12]}), patch by patch (as `make drift` classifies it):")
    for outcome in outcomes:
        say(f"  {describe(outcome)}")


def _resolve_onto(git: Git, ref: str, release: str | None, project: ProjectKind) -> tuple[str, str | None]:
    commit = git.rev_parse(ref)
    if project.from_git:  # a DeepGEMM "release" is a commit: its short id names the new line
        commit = git.rev_parse(f"{ref}^{{commit}}")
        if commit is None:
            raise FatalError(f"{ref} is not a commit in this checkout (fetch it from {project.upstream_url})")
        return commit, release or commit[:7]
    named = release or release_of(ref)
    if commit:
        return commit, named
    if named:
        return release_commit(named, git), named
    raise FatalError(f"{ref} is neither a commit in this checkout nor an sglang release version")


# -- the replay loop ---------------------------------------------------------------


def _replay(target: Target, folder: Path, state: RebaseState, series: Series) -> int:
    git = target.git
    scratch = git.with_env(GIT_INDEX_FILE=str(folder / "scratch-index"))
    history = history_between(git, state.base, state.onto)
    # decided once: with the patterns unapplied git sets no skip-worktree bit; a sparse checkout in effect keeps its own
    sparse = git.sparse_as_it_is()
    while state.next < len(state.commits):
        index = state.next
        patch, commit = series.patches[index], state.commits[index]
        if patch.name in state.dropped:
            _record(folder, state, patch.name, DROPPED, LEFT_OUT)
            state.checked = state.next
            continue
        head = git.run("rev-parse", "HEAD")
        step = land(scratch, head, patch, commit, history, merge_upstream=not state.drop_upstreamed)
        if step.kind == Landing.UPSTREAM:
            _record(folder, state, patch.name, Landing.UPSTREAM, f"{step.upstream}; dropped")
            state.checked = state.next
            continue
        with write_phase():
            # --cleanup=verbatim: the patch's message as it is (the user's `commit.cleanup=strip` dropped its lines
            # that start with `#`, "#1234 is the issue", from every rebased patch)
            pick = ("-c", "merge.renames=true", "cherry-pick", "--cleanup=verbatim", commit)
            status, _, err = git.committing().try_run(*sparse, *pick)
            fault_point(f"rebase: {patch.name} picked")
        if status != 0 and disk_full(err):
            raise DiskFull(f"git could not pick {patch.name} ({git_reason(err)})")
        if status != 0 and not git.run("diff", "--name-only", "--diff-filter=U"):
            _undo_pick(git, head)  # not a conflict (say, a commit that could not be signed): no work to resolve
            raise FatalError(f"git could not commit {patch.name} ({error_line(err)})")
        if status != 0:
            _stop_at_conflict(git, folder, state, patch.name, step.upstream)
        detail = f"already upstream ({step.upstream}), kept" if step.upstream else ""
        _record(folder, state, patch.name, Landing.CLEAN if step.kind == Landing.CLEAN else Landing.THREE_WAY, detail)
        _check_prefix(git, folder, state, patch.name)
    return _finish(target, folder, state, series)


def _undo_pick(git: Git, head: str) -> None:
    """Take back what a pick that failed without a conflict wrote. One git refused before its merge (no
    CHERRY_PICK_HEAD, HEAD where it was: "Your local changes ... would be overwritten", an edit of the user's made
    while the rebase waited, to a file this patch changes) wrote nothing, and a `reset --hard` threw that edit away."""
    with write_phase():
        if not (git.git_dir() / "CHERRY_PICK_HEAD").exists() and git.run("rev-parse", "HEAD") == head:
            return
        if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
            git.run("cherry-pick", "--quit")
        with rebase_settle.orig_head_kept(git):
            git.run(*git.sparse_as_it_is(), "reset", "-q", "--hard", head)
        fault_point("rebase: a failed pick undone")


def _stop_at_conflict(git: Git, folder: Path, state: RebaseState, name: str, upstream: str | None) -> None:
    files = git.paths("diff", "--name-only", "--diff-filter=U")
    hint = f" (upstream already has it: {upstream})" if upstream else ""
    head = git.run("rev-parse", "HEAD")
    state.stopped = Stop(StopKind.CONFLICT, name, head, files, upstream)
    save(folder, state)
    raise Stopped(
        f"{name} conflicts in {', '.join(files) or 'the tree'}{hint}; resolve, `git add` the files, "
        f"then {hints.continue_rebase(git.workdir)}, or {hints.drop_rebase(state.patches.index(name) + 1, git.workdir)} to leave it out, "
        f"or {hints.abort_rebase(git.workdir)} to put everything back"
    )


def _record(folder: Path, state: RebaseState, name: str, kind: str, detail: str) -> None:
    label = {Landing.THREE_WAY: MERGED}.get(kind, str(kind))
    state.outcomes.append(PatchResult(name, label, detail))
    state.next += 1
    state.stopped = None
    with write_phase():
        save(folder, state)
        fault_point(f"rebase: {name} recorded")
    say(f"  {name}: {label}{f' ({detail})' if detail else ''}")


def _check_prefix(git: Git, folder: Path, state: RebaseState, name: str) -> None:
    """Each prefix of the series must byte-compile (and, with --check-imports, import) what it touched."""
    changed = git.paths("diff", "--name-only", "--diff-filter=AMR", "HEAD~1", "HEAD", "--", "*.py")
    problem = compile_error(git.workdir, changed)
    if problem is None and state.check_imports:
        progress(f"importing the modules {name} touched (CPU)")
        problem = import_error(git.workdir, changed)
    if problem:
        head = git.run("rev-parse", "HEAD~1")  # what the patch went onto: an amended commit still sits on it
        state.stopped = Stop(StopKind.CHECK, name, head, changed, problem=problem)
        save(folder, state)
        raise Stopped(
            f"after {name}, {problem}; fix it with `git commit --amend`, "
            f"then {hints.continue_rebase(git.workdir)}, or {hints.abort_rebase(git.workdir)}"
        )
    state.checked = state.next
    with write_phase():
        save(folder, state)
        fault_point(f"rebase: {name} checked")


# -- continue / abort ----------------------------------------------------------------


def resume(target: Target, folder: Path, state: RebaseState | None) -> int:
    """Go on with a rebase stopped for the user, once they resolved the conflict or fixed the cause."""
    git = target.git
    if state is None:
        raise FatalError("no rebase in progress here")
    if state.stopped and state.dropping:  # the pick may be undone, the locks are that run's: it settles them
        raise FatalError(
            f"a --drop of {state.stopped.patch} was cut short, which --continue cannot go on from; nothing was "
            f"changed: run {hints.drop_rebase(_number(state), target.root)} again, or {hints.abort_rebase(target.root)}"
        )
    stopped, series = _stopped_rebase(target, folder, state)
    with _settled_if_interrupted(target, folder), _stopped_on_error(target, folder):
        if stopped.kind != StopKind.CONFLICT:  # the user fixed it: amended the commit, or the cause
            state.stopped = None
            state.resolved_by_hand = state.resolved_by_hand or stopped.kind == StopKind.CHECK
            with write_phase():
                save(folder, state)
            if stopped.recorded:
                _check_prefix(git, folder, state, stopped.patch)
        else:
            _commit_resolution(git, folder, state, stopped)
            _record(folder, state, stopped.patch, RESOLVED, "")
            _check_prefix(git, folder, state, stopped.patch)
        return _replay(target, folder, state, series)


def _stopped_rebase(target: Target, folder: Path, state: RebaseState | None) -> tuple[Stop, Series]:
    """Why the rebase waits (and its series), once sure it can go on from here; FatalError otherwise."""
    if state is None:
        raise FatalError("no rebase in progress here")
    stopped = state.stopped
    if stopped is None:
        rebase_store.refuse_in_progress(target)
    if state.aborting:  # it may have undone the pick, the resolution or the switch: there is no going on from it
        raise FatalError(
            f"an --abort of this rebase was cut short, which it cannot go on from; nothing was changed: run "
            f"{hints.abort_rebase(target.root)} again"
        )
    rebase_store.check_can_go_on(state, folder, target.root)
    _refuse_moved_since_stop(target.git, state, stopped)
    patch_dir = Path(state.patch_dir)
    if series_digest(patch_dir) != state.series_digest:
        raise FatalError(
            f"{patch_dir} changed since the rebase stopped; put it back as it was to continue, "
            f"or {hints.abort_rebase(target.root)} and start again"
        )
    return stopped, load_series(patch_dir)


# -- drop ------------------------------------------------------------------------------


def patches_named(spec: str, names: list[str]) -> list[str]:
    """The patches `spec` names, comma-separated: a number in the series (`2`, `0002`), a file name, or the
    start of one (`0002-DSA`); FatalError for one that names no patch or several."""
    chosen = []
    for item in (part.strip() for part in spec.split(",")):
        if item.isdigit():
            found = [names[int(item) - 1]] if 1 <= int(item) <= len(names) else []
        else:
            found = [n for n in names if n == item] or [n for n in names if n.startswith(item)]
        if len(found) != 1:
            raise FatalError(
                f"--drop {item!r} names {'no' if not found else 'more than one'} patch of the series "
                f"(1 to {len(names)}, or a name: {', '.join(names)})"
            )
        chosen += [n for n in found if n not in chosen]
    return chosen


def drop(target: Target, folder: Path, state: RebaseState | None, spec: str) -> int:
    """While the rebase is stopped, leave patches out: the one it stopped at (then go on, as `git rebase
    --skip` does) or later ones (left out when the rebase gets there). What earlier patches became, hand
    resolutions included, stays: they are in HEAD's history, which dropping never rewrites."""
    stopped, series = _stopped_rebase(target, folder, state)
    names = patches_named(spec, state.patches)
    here = state.patches.index(stopped.patch) if stopped.patch in state.patches else len(state.patches)
    done = [n for n in names if state.patches.index(n) < here]
    if done:
        raise FatalError(
            f"{', '.join(done)} {'is' if len(done) == 1 else 'are'} already rebased (the rebase is stopped at "
            f"{stopped.patch}); to leave {'it' if len(done) == 1 else 'them'} out, {hints.abort_rebase(target.root)} and start "
            f"again with DROP="
        )
    if state.dropping and stopped.patch not in names:  # its record would make the cut run's locks look older
        raise FatalError(
            f"a --drop of {stopped.patch} was cut short, and only it settles what that run left; nothing was changed: "
            f"run {hints.drop_rebase(_number(state), target.root)} again first, then this one, or {hints.abort_rebase(target.root)}"
        )
    mine = None
    if stopped.patch in names:
        if state.dropping:  # a --drop of it was cut short inside its git: the locks that run left, before any git
            remove_locks_of_a_cut_run(target)
        _refuse_changes_beside_the_stop(target.git, state, f"--drop {spec}")
        mine = _commits_made_while_stopped(target.git, state, "dropped")
    later = [n for n in names if n != stopped.patch and n not in state.dropped]
    with _settled_if_interrupted(target, folder), _stopped_on_error(target, folder):
        if later:
            state.dropped = state.dropped + later
            with write_phase():
                save(folder, state)
            say(f"will leave out {', '.join(later)} when the rebase gets there")
        if stopped.patch not in names:
            say(f"{stopped.describe()}: resolve it, then {hints.continue_rebase(target.root)}")
            return 0
        if not state.dropping:  # from here the git locks a kill leaves are this run's, and ORIG_HEAD the user's
            state.dropping, state.orig_head = True, target.git.rev_parse("ORIG_HEAD")
            with write_phase():
                save(folder, state)
        if mine:
            with write_phase():
                target.git.run("update-ref", mine, "HEAD")
            say(f"the commits made while the rebase waited are kept at {mine}")
        _drop_stopped_patch(target.git, folder, state, stopped)
        return _replay(target, folder, state, series)


def _number(state: RebaseState) -> int:
    """The stopped patch's number in the series, as --drop takes it."""
    return state.patches.index(state.stopped.patch) + 1 if state.stopped.patch in state.patches else 0


def _drop_stopped_patch(git: Git, folder: Path, state: RebaseState, stopped: Stop) -> None:
    """Undo what the rebase did for the patch it stopped at (a conflicted pick, or its recorded commit), back
    to the commit it went onto, and record it as left out. Safe to run again after a kill."""
    before = _dropped_back_to(git, stopped)
    with write_phase():
        if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
            git.run("cherry-pick", "--quit")
        git.run(*git.sparse_as_it_is(), "reset", "-q", "--hard", before)
        # as when the --drop began: a run of it killed inside its git may have left ORIG_HEAD as the reset wrote it
        rebase_settle.put_back_orig_head(git, state.orig_head)
        fault_point(f"rebase: {stopped.patch} taken out")
    if stopped.recorded:
        state.outcomes = [o for o in state.outcomes if o.patch != stopped.patch]
        state.next = state.patches.index(stopped.patch)
    state.dropped = state.dropped + [stopped.patch] if stopped.patch not in state.dropped else state.dropped
    state.dropping = False  # recorded: a lock left after this is not the --drop's
    _record(folder, state, stopped.patch, DROPPED, LEFT_OUT)
    state.checked = state.next


def _dropped_back_to(git: Git, stopped: Stop) -> str:
    """The commit a --drop of the stopped patch resets to: the one that patch went onto."""
    return (
        git.run("rev-parse", f"{stopped.head}~1")
        if stopped.kind == StopKind.ERROR and stopped.recorded
        else stopped.head
    )


def _refuse_moved_since_stop(git: Git, state: RebaseState, stopped: Stop) -> None:
    """--continue builds on HEAD: it must still be the detached rebase, on ONTO and on where it stopped."""
    branch = git.current_branch()
    head = git.run("rev-parse", "HEAD")
    where = stopped.head or state.onto
    if branch is not None or not (git.is_ancestor(state.onto, head) and git.is_ancestor(where, head)):
        raise FatalError(
            f"HEAD is {f'on branch {branch}' if branch else 'elsewhere'}, not where the rebase stopped; "
            f"`git checkout --detach {where[:12]}` (then redo your fix) to continue, or {hints.abort_rebase(git.workdir)}"
        )


def _commit_resolution(git: Git, folder: Path, state: RebaseState, stopped: Stop) -> None:
    """Commit the resolved conflict, unless the user (or a run killed right after) already did."""
    if not (git.git_dir() / "CHERRY_PICK_HEAD").exists():
        if git.run("rev-parse", "HEAD") == stopped.head:
            raise FatalError(
                f"the cherry-pick of {stopped.patch} is gone and nothing was committed for it; "
                f"run {hints.abort_rebase(git.workdir)} and start again"
            )
        state.resolved_by_hand = True
        return
    unmerged = git.paths("diff", "--name-only", "--diff-filter=U")
    if unmerged:
        raise FatalError(f"still unresolved: {', '.join(unmerged)}; resolve and `git add` them first")
    state.resolved_by_hand = True
    with write_phase():
        save(folder, state)
        # the patch's own message, as it is: `git cherry-pick --continue` commits the message it would open an
        # editor on, and so strips every line that starts with the comment character (`#1234 ...`), or, with
        # core.commentChar=auto, keeps the `# Conflicts:` lines it adds
        status, _, err = git.committing().try_run("commit", "-q", "--cleanup=verbatim", "-C", "CHERRY_PICK_HEAD")
        fault_point("rebase: resolution committed")
    if status != 0:
        raise FatalError(
            f"git could not commit the resolution of {stopped.patch}: "
            f"{err.strip().splitlines()[-1] if err.strip() else status}"
        )


def abort(target: Target, folder: Path, state: RebaseState | None) -> int:
    """Put the checkout back as it was before the rebase began."""
    if state is None:
        raise FatalError("no rebase in progress here")
    git = target.git
    if state.stopped is None and not state.aborting:  # a run killed mid-way: recover settles it, edits refused
        rebase_store.refuse_in_progress(target)
    if state.aborting or state.dropping:  # an --abort or a --drop cut short inside its git: that run's locks
        remove_locks_of_a_cut_run(target)
    _refuse_changes_beside_the_stop(git, state, "--abort", going_back=True)
    mine = _commits_made_while_stopped(git, state, "aborted")
    rebase_settle.refuse_roll_back(git, state)
    with write_phase(f"the rebase was rolled back: {target.root} is as it was"):
        if state.begun and not state.aborting:  # from here the git locks a kill leaves are this run's
            # a --drop cut short recorded ORIG_HEAD before its `reset --hard` could move it: that one stays
            state.aborting, state.orig_head = True, state.orig_head if state.dropping else git.rev_parse("ORIG_HEAD")
            save(folder, state)
        if mine:
            git.run("update-ref", mine, "HEAD")
        rebase_settle.roll_back(git, folder, state)
    head = git.run("rev-parse", "HEAD")[:12]
    where = f"back on {state.original} at {head}" if state.begun else "nothing had changed"
    kept = f"; the commits made while it waited are kept at {mine}" if mine else ""
    say(f"rebase aborted: {where}{kept}")
    return 0


_WHOLE_PATCH = "--binary --no-ext-diff --no-textconv --no-color"  # every byte, whatever the user's diff config


def _refuse_changes_beside_the_stop(git: Git, state: RebaseState, option: str, going_back: bool = False) -> None:
    """While a rebase waits, the files of the patch it stopped at are the user's to resolve, and `option` throws
    that away (`git checkout -f`, `git reset --hard`); a change to any other file is work of the user's, but, when
    `option` goes back to the original branch (--abort), not one that is already as that branch has it."""
    stopped = state.stopped
    if stopped is None or not state.begun:
        return
    ours = set(stopped.files)
    # a stop on an error took its pick back (or made none): a change to that patch's files is the user's too
    if state.patches and state.commits and stopped.patch in state.patches and stopped.kind != StopKind.ERROR:
        picked = state.commits[state.patches.index(stopped.patch)]
        ours |= set(git.paths("diff-tree", "-r", "--name-only", "--no-commit-id", picked))
    changed = git.paths("diff", "--name-only", "--no-renames", "HEAD")
    # what the option writes there: the original branch (--abort), or, after a --drop cut short inside its
    # `reset --hard` (which removes a file before HEAD moves), what that drop resets to
    leaves = state.original if going_back else _dropped_back_to(git, stopped) if state.dropping else None
    beside = [p for p in changed if p not in ours and not (leaves and _as_it_leaves_it(git, state, leaves, p))]
    if beside:
        files, root = shlex.join(beside), shlex.quote(str(git.workdir))
        # a folder that took a file's place: the diff saves the file's deletion, not the folder's (ignored) files,
        # and the checkout deletes them with it
        folders = [p for p in beside if (git.workdir / p).is_dir() and not (git.workdir / p).is_symlink()]
        keep = f"keep a copy of each folder there ({hints.keep_copies(git.workdir, folders)}), " if folders else ""
        # `set -C`: the advice never overwrites a file of the user's that has the name already
        raise FatalError(
            f"{', '.join(beside[:5])} changed while the rebase waited, and {stopped.patch} does not touch "
            f"{'it' if len(beside) == 1 else 'them'}: {option} would throw that away; nothing was changed: save "
            f"the changes (`(set -C; git --literal-pathspecs -C {root} diff {_WHOLE_PATCH} HEAD -- {files} > "
            "my-changes.patch)`; git "
            f"stashes nothing while a pick conflicts), {keep}put the files back as HEAD has them "
            f"(`git --literal-pathspecs -C {root} checkout HEAD -- {files}`), then run this again"
        )


def _as_it_leaves_it(git: Git, state: RebaseState, commit: str, path: str) -> bool:
    """Whether `path` is what going to `commit` puts there: its bytes (as committed, or as git writes them), or no
    file where it has none; or no file after an --abort or a --drop cut short inside its git (`git checkout -f`,
    `reset --hard`), which removes a file before it writes it again. Nothing of the user's is thrown away there."""
    local = git.workdir / path
    if not os.path.lexists(local):
        return state.aborting or state.dropping or git.call(("cat-file", "-e", f"{commit}:{path}"))[0] != 0
    if not local.is_file() or local.is_symlink():
        return False
    data = local.read_bytes()
    written = (git.call(("cat-file", how, f"{commit}:{path}")) for how in ("blob", "--filters"))
    return any(status == 0 and data == theirs for status, theirs, _ in written)


def _commits_made_while_stopped(git: Git, state: RebaseState, why: str) -> str | None:
    """The ref that keeps what HEAD holds past where the rebase stopped (commits of the user's, say the
    resolution), which going back to the original branch or past the stopped patch leaves behind; None when
    there are none."""
    stopped = state.stopped
    if stopped is None or not stopped.head or not state.begun:
        return None
    head = git.rev_parse("HEAD")
    if head is None or head == stopped.head or git.is_ancestor(head, stopped.head):
        return None
    if state.original_head and git.is_ancestor(head, state.original_head):
        return None  # back where the rebase began (an --abort killed after its switch back): not the user's
    return f"refs/sglpatch/backup/{why}-{head[:12]}"


# -- finishing -------------------------------------------------------------------------


def _finish(target: Target, folder: Path, state: RebaseState, series: Series) -> int:
    """Stage the result (new series files, range-diff, checkout record), then install it."""
    git = target.git
    name = state.release or state.onto[:12]
    branch = f"sglpatch/{_line_name(state)}" if state.release else f"sglpatch/onto-{name}"
    if git.rev_parse(f"refs/heads/{branch}"):  # then a name of its own: a rebase finished in the same second
        stamped, number = f"{branch}-{time.strftime('%Y%m%d-%H%M%S')}", 2  # (another worktree's) took the first
        branch = stamped
        while git.rev_parse(f"refs/heads/{branch}"):
            branch, number = f"{stamped}-{number}", number + 1
    kept = int(git.run("rev-list", "--count", f"{state.onto}..HEAD"))
    files: dict[str, bytes] = {}
    report = None
    if state.release:
        report = _range_diff(git, state, Path(state.report_dir))
        if kept:
            new_pin = _pin_for(state.release, load_pin(Path(state.patch_dir)), git, state.onto)
            files = render_series(git, state.onto, "HEAD", new_pin)
            out_dir = state.series_out_dir
            refuse_unlisted_in_the_way(out_dir, files, listed_patches(out_dir))
    record = _checkout_record(target, state, branch)
    with write_phase():
        rebase_settle.stage(folder, state, files, report, record)
    with write_phase(f"the rebase is finished: {target.root} is fully patched (branch {branch})"):
        rebase_settle.install(target, folder, state)
    say(f"rebased onto {state.onto_name}: branch {branch}, {kept} of {len(series.patches)} patches kept")
    if left_out := [o.patch for o in state.outcomes if o.outcome == DROPPED]:
        say(
            f"left out by hand, so the rebased series omits {'it' if len(left_out) == 1 else 'them'}: "
            + ", ".join(left_out)
        )
    patch_dir, out_dir = state.patch_dir, state.series_out_dir
    if files and str(out_dir) != patch_dir:
        say(
            f"wrote the line {out_dir} against {pinned_kind(Path(patch_dir)).name} {state.release} ({patch_dir} is as it was)"
        )
        say(
            f"  range-diff for review: {report[0]}; add its pr-groups.json by hand (`make drift DOCS=1` its upstream.json)"
        )
    elif files:
        say(f"rewrote {patch_dir} against sglang {state.release}; range-diff for review: {report[0]}")
    elif report and not left_out:
        say(f"every patch is upstream at {state.release}: {patch_dir} left as it was; range-diff: {report[0]}")
    elif report:
        say(f"no patch is left on {state.release}: {patch_dir} left as it was; range-diff: {report[0]}")
    else:
        say("ONTO is not a named release: patches/ left as it was (pass --release X to regenerate it)")
    return 0


def _line_name(state: RebaseState) -> str:
    """The new line's name: v<release>, or a DeepGEMM line's <kind>/<short commit>."""
    kind = pinned_kind(Path(state.patch_dir))
    return f"{kind.name}/{state.release}" if kind.from_git else f"v{state.release}"


def _checkout_record(target: Target, state: RebaseState, branch: str) -> CheckoutRecord:
    """What `apply` would have recorded for the rebased branch; the record it replaces is kept inside."""
    git = target.git
    before = current_record(target)
    # the series' files on both branches: what a revert's switch back to the one below writes (none kept: the
    # files of the series below, not "the whole package", which an empty list means)
    touched = set(git.paths("diff", "--name-only", "--no-renames", state.onto, "HEAD"))
    touched |= set(before.touched if before else [])
    return CheckoutRecord(  # applied: a record's state when none is given
        branch=branch,
        previous=state.original,
        head=git.run("rev-parse", "HEAD"),
        patches=[o.patch for o in state.outcomes if o.kept],
        touched=sorted(touched),
        rebased_onto=state.onto_name,
        before=before,
    )


def _pin_for(release: str, old: Pin, git: Git, onto: str) -> Pin:
    if old.project.from_git:  # the new line pins ONTO by commit; the stand-in stays the old one's
        day = git.run("log", "-1", "--format=%cs", onto)
        return Pin(release, f"{old.project.name}/{release}", day, old.wheel, old.blobs, old.project, onto)
    wheel_path = fetch_wheel(release)
    wheel = Wheel(wheel_path.name, file_sha256(wheel_path), old.wheel.python_version, old.wheel.platform)
    return Pin(release, f"v{release}", release_date(wheel_path, release), wheel, old.blobs)


def _range_diff(git: Git, state: RebaseState, report_dir: Path) -> tuple[str, str]:
    """(path, text) of the range-diff between the old and the new series, for reviewers."""
    old_name = git.run("describe", "--tags", "--always", state.base)
    path = report_dir / f"range-diff-{old_name}-to-v{state.release}.txt"
    if git.run("rev-parse", "HEAD") == state.onto:
        diff = "(no patch is left on the new base: every patch was dropped, as listed above)\n"
    else:
        old, new = f"{state.base}..{SERIES_REF}", f"{state.onto}..HEAD"
        diff = git.run("range-diff", "--no-color", "--creation-factor=95", old, new, strip=False)
    lines = [f"# git range-diff of the series: {old_name} -> v{state.release}", ""]
    lines += [f"# {o.line()}" for o in state.outcomes]
    return str(path), "\n".join(lines) + "\n\n" + diff
