"""`sglpatch rebase`: carry the series onto a newer sglang in a git checkout.

The series (from patches/) is made into commits on the pinned base, then
cherry-picked one by one onto ONTO (a commit, a tag, or a release version made
from its PyPI wheel) with git's 3-way merge and rename detection. Each patch is
reported clean / merged with changes / conflict / already upstream. A conflict
stops with the conflict in the work tree; `--continue` goes on after the user
resolves it, `--abort` puts back the branch, index and work tree as they were.
The original HEAD is kept under refs/sglpatch/backup/ whatever happens.
On success, patches/ is rewritten against ONTO (new pin) and a range-diff of
the old and new series is written for reviewers.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from sglpatch.carry import CLEAN, THREE_WAY, UPSTREAM, series_commits, upstream_reason
from sglpatch.checks import compile_error, import_error
from sglpatch.commands.common import add_series_options, add_target_option, load_inputs, resolve_target
from sglpatch.commands.export import export_series
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.output import progress, say
from sglpatch.pin import Pin, Wheel, load_pin
from sglpatch.project import PROJECT_ROOT, default_patch_dir
from sglpatch.releases import release_commit, release_date, release_of
from sglpatch.series import Series, load_series
from sglpatch.target import Target, target_lock
from sglpatch.wheels import fetch_wheel, file_sha256

STATE_DIR = "sglpatch-rebase"
SERIES_REF = "refs/sglpatch/rebase/series"
MERGED = "merged with changes"
RESOLVED = "conflict, resolved by hand"


class Stopped(FatalError):
    """The rebase stopped for the user (conflict, failing check); state is kept for --continue/--abort."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_series_options(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--onto", metavar="REF", help="tag, commit, or sglang release version (fetched from PyPI)")
    action.add_argument("--continue", dest="resume", action="store_true", help="go on after resolving a conflict")
    action.add_argument("--abort", action="store_true", help="put everything back as it was before the rebase")
    parser.add_argument("--drop-upstreamed", action="store_true", help="drop patches upstream already has")
    parser.add_argument(
        "--check-imports",
        action="store_true",
        help="also import each prefix's touched modules on CPU (needs make test's env)",
    )
    parser.add_argument("--release", help="the sglang release ONTO is, when its name does not say (for the new pin)")
    parser.add_argument(
        "--report-dir", type=Path, default=PROJECT_ROOT / "docs" / "rebase", help="where the range-diff is written"
    )


def run(args) -> int:
    target = resolve_target(args)
    if not target.is_git:
        raise FatalError("rebase needs a git checkout (a package folder has no history to rebase)")
    with target_lock(target):
        state_dir = target.git.git_dir() / STATE_DIR
        if args.abort:
            return _abort(target, state_dir)
        if args.resume:
            return _resume(target, state_dir)
        if state_dir.exists():
            raise FatalError("a rebase is already in progress here; use --continue or --abort")
        return _start(target, state_dir, args)


# -- starting ----------------------------------------------------------------------


def _start(target: Target, state_dir: Path, args) -> int:
    git = target.git
    series, pin = load_inputs(args)
    if git.run("status", "--porcelain", "--untracked-files=no"):
        raise FatalError("the checkout has uncommitted changes; commit or stash them before rebasing")
    onto, release = _resolve_onto(git, args.onto, args.release)
    base = git.rev_parse(pin.tag) or release_commit(pin.release, git, fetch_wheel(pin.release, pin.wheel))
    commits = series_commits(git, base, series.patches)
    try:
        commits.workspace.hand_over(commits.commits[-1], git, SERIES_REF)
    finally:
        commits.workspace.close()
    head = git.run("rev-parse", "HEAD")
    backup = f"refs/sglpatch/backup/{time.strftime('%Y%m%d-%H%M%S')}"
    git.run("update-ref", backup, head)
    state = {
        "original": git.current_branch() or head,
        "original_head": head,
        "backup": backup,
        "onto": onto,
        "onto_name": args.onto,
        "release": release,
        "base": base,
        "patch_dir": str(Path(args.patches or default_patch_dir()).resolve()),
        "report_dir": str(args.report_dir.resolve()),
        "drop_upstreamed": args.drop_upstreamed,
        "check_imports": args.check_imports,
        "commits": commits.commits,
        "next": 0,
        "outcomes": [],
    }
    state_dir.mkdir()
    _save(state_dir, state)
    status, _, err = git.try_run("checkout", "-q", "--detach", onto)
    if status != 0:
        shutil.rmtree(state_dir)
        raise FatalError(f"could not check out {args.onto}: {err.strip()}; nothing was changed")
    progress(f"rebasing {len(series.patches)} patches onto {args.onto} ({onto[:12]}); backup of HEAD at {backup}")
    return _replay(target, state_dir, state, series)


def _resolve_onto(git: Git, ref: str, release: str | None) -> tuple[str, str | None]:
    commit = git.rev_parse(ref)
    named = release or release_of(ref)
    if commit:
        return commit, named
    if named:
        return release_commit(named, git), named
    raise FatalError(f"{ref} is neither a commit in this checkout nor an sglang release version")


# -- the replay loop ---------------------------------------------------------------


def _replay(target: Target, state_dir: Path, state: dict, series: Series) -> int:
    git = target.git
    scratch = git.with_env(GIT_INDEX_FILE=str(state_dir / "scratch-index"))
    history = (state["base"], state["onto"]) if _is_ancestor(git, state["base"], state["onto"]) else None
    while state["next"] < len(state["commits"]):
        index = state["next"]
        patch, commit = series.patches[index], state["commits"][index]
        reason = upstream_reason(scratch, "HEAD", patch, history)
        if reason and state["drop_upstreamed"]:
            _record(state_dir, state, patch.name, UPSTREAM, f"{reason}; dropped")
            continue
        scratch.run("read-tree", "HEAD")
        applies_as_is = scratch.try_run("apply", "--cached", "--check", str(patch.path))[0] == 0
        status, _, _ = git.with_env(GIT_EDITOR="true").try_run("-c", "merge.renames=true", "cherry-pick", commit)
        if status != 0:
            files = git.run("diff", "--name-only", "--diff-filter=U").splitlines()
            hint = f" ({reason}: consider --abort, then --drop-upstreamed)" if reason else ""
            state["stopped"] = {"patch": patch.name, "files": files, "upstream": reason}
            _save(state_dir, state)
            raise Stopped(
                f"{patch.name} conflicts in {', '.join(files) or 'the tree'}{hint}; resolve, `git add` the files, "
                "then `make rebase CONTINUE=1`, or `make rebase ABORT=1` to put everything back"
            )
        detail = f"already upstream ({reason}), kept" if reason else ""
        _record(state_dir, state, patch.name, CLEAN if applies_as_is else THREE_WAY, detail)
        _check_prefix(git, state_dir, state, patch.name)
    return _finish(target, state_dir, state, series)


def _record(state_dir: Path, state: dict, name: str, kind: str, detail: str) -> None:
    label = {THREE_WAY: MERGED}.get(kind, kind)
    state["outcomes"].append({"patch": name, "outcome": label, "detail": detail})
    state["next"] += 1
    state.pop("stopped", None)
    _save(state_dir, state)
    say(f"  {name}: {label}{f' ({detail})' if detail else ''}")


def _check_prefix(git: Git, state_dir: Path, state: dict, name: str) -> None:
    """Each prefix of the series must byte-compile (and, with --check-imports, import) what it touched."""
    changed = git.run("diff", "--name-only", "--diff-filter=AMR", "HEAD~1", "HEAD", "--", "*.py").splitlines()
    problem = compile_error(git.workdir, changed)
    if problem is None and state.get("check_imports"):
        progress(f"importing the modules {name} touched (CPU)")
        problem = import_error(git.workdir, changed)
    if problem:
        state["stopped"] = {"patch": name, "files": changed, "check": problem}
        _save(state_dir, state)
        raise Stopped(
            f"after {name}, {problem}; fix it with `git commit --amend`, "
            "then `make rebase CONTINUE=1`, or `make rebase ABORT=1`"
        )


def _is_ancestor(git: Git, older: str, newer: str) -> bool:
    return git.try_run("merge-base", "--is-ancestor", older, newer)[0] == 0


# -- continue / abort ----------------------------------------------------------------


def _resume(target: Target, state_dir: Path) -> int:
    state = _load(state_dir)
    git = target.git
    stopped = state.get("stopped")
    if stopped is None:
        raise FatalError("the rebase is not stopped; nothing to continue")
    if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
        unmerged = git.run("diff", "--name-only", "--diff-filter=U").splitlines()
        if unmerged:
            raise FatalError(f"still unresolved: {', '.join(unmerged)}; resolve and `git add` them first")
        status, _, err = git.with_env(GIT_EDITOR="true").try_run("cherry-pick", "--continue")
        if status != 0:
            raise FatalError(
                f"git cherry-pick --continue failed: {err.strip().splitlines()[-1] if err.strip() else status}"
            )
        _record(state_dir, state, stopped["patch"], RESOLVED, "")
        _check_prefix(git, state_dir, state, stopped["patch"])
    else:  # a failing check stopped us; the user amended the commit
        state.pop("stopped")
        _check_prefix(git, state_dir, state, stopped["patch"])
    return _replay(target, state_dir, state, load_series(Path(state["patch_dir"])))


def _abort(target: Target, state_dir: Path) -> int:
    state = _load(state_dir)
    git = target.git
    if (git.git_dir() / "CHERRY_PICK_HEAD").exists():
        git.try_run("cherry-pick", "--abort")
    git.run("checkout", "-q", "-f", state["original"])
    if git.run("rev-parse", "HEAD") != state["original_head"]:
        git.run("reset", "-q", "--hard", state["original_head"])
    git.try_run("update-ref", "-d", SERIES_REF)
    shutil.rmtree(state_dir)
    say(
        f"rebase aborted: back on {state['original']} at {state['original_head'][:12]} (backup kept at {state['backup']})"
    )
    return 0


# -- finishing -------------------------------------------------------------------------


def _finish(target: Target, state_dir: Path, state: dict, series: Series) -> int:
    git = target.git
    name = state["release"] or state["onto"][:12]
    branch = f"sglpatch/v{name}" if state["release"] else f"sglpatch/onto-{name}"
    if git.rev_parse(f"refs/heads/{branch}"):
        branch = f"{branch}-{time.strftime('%Y%m%d-%H%M%S')}"
    git.run("checkout", "-q", "-b", branch)
    kept = git.run("rev-list", "--count", f"{state['onto']}..HEAD")
    say(f"rebased onto {state['onto_name']}: branch {branch}, {kept} of {len(series.patches)} patches kept")
    if state["release"]:
        patch_dir = Path(state["patch_dir"])
        new_pin = _pin_for(state["release"], load_pin(patch_dir))
        report = _write_range_diff(git, state, Path(state["report_dir"]))
        if int(kept):
            export_series(git, state["onto"], "HEAD", patch_dir, new_pin)
            say(f"rewrote {patch_dir} against sglang {state['release']}; range-diff for review: {report}")
        else:
            say(f"every patch is upstream at {state['release']}: {patch_dir} left as it was; range-diff: {report}")
    else:
        say("ONTO is not a named release: patches/ left as it was (pass --release X to regenerate it)")
    git.try_run("update-ref", "-d", SERIES_REF)
    shutil.rmtree(state_dir)
    return 0


def _pin_for(release: str, old: Pin) -> Pin:
    wheel_path = fetch_wheel(release)
    wheel = Wheel(wheel_path.name, file_sha256(wheel_path), old.wheel.python_version, old.wheel.platform)
    return Pin(release, f"v{release}", release_date(wheel_path), wheel, old.blobs)


def _write_range_diff(git: Git, state: dict, report_dir: Path) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    old_name = git.run("describe", "--tags", "--always", state["base"])
    path = report_dir / f"range-diff-{old_name}-to-v{state['release']}.txt"
    if git.run("rev-parse", "HEAD") == state["onto"]:
        diff = "(no patch is left on the new base: every patch was dropped as upstream)\n"
    else:
        old, new = f"{state['base']}..{SERIES_REF}", f"{state['onto']}..HEAD"
        diff = git.run("range-diff", "--no-color", "--creation-factor=95", old, new, strip=False)
    lines = [f"# git range-diff of the series: {old_name} -> v{state['release']}", ""]
    lines += [
        f"# {o['patch']}: {o['outcome']}{' (' + o['detail'] + ')' if o['detail'] else ''}" for o in state["outcomes"]
    ]
    path.write_text("\n".join(lines) + "\n\n" + diff)
    return path


def _save(state_dir: Path, state: dict) -> None:
    tmp = state_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / "state.json")


def _load(state_dir: Path) -> dict:
    if not (state_dir / "state.json").is_file():
        raise FatalError("no rebase in progress here")
    return json.loads((state_dir / "state.json").read_text())
