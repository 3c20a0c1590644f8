"""`sglpatch apply`: the whole series onto a target, or nothing at all."""

from __future__ import annotations

import json
import time

from sglpatch import journal
from sglpatch.base import ensure_default_base
from sglpatch.commands.common import add_series_options, add_target_option, load_inputs, resolve_target
from sglpatch.errors import FatalError
from sglpatch.output import plural, say
from sglpatch.plan import APPLIED, Plan, make_plan
from sglpatch.project import default_base_dir
from sglpatch.target import Target, target_lock

STATE_FILE = "sglpatch-state.json"


def add_arguments(parser) -> None:
    add_target_option(parser)
    add_series_options(parser)
    parser.add_argument(
        "--3way",
        dest="three_way",
        action="store_true",
        help="git targets: fall back to a 3-way apply where the base differs from the pin",
    )
    parser.add_argument("--branch", help="git targets: branch for the series (default sglpatch/<pin tag>)")


def run(args) -> int:
    started = time.monotonic()
    series, pin = load_inputs(args)
    if args.sglang is None:
        ensure_default_base(pin, default_base_dir())
    target = resolve_target(args)
    if args.three_way and not target.is_git:
        raise FatalError("--3way needs a git checkout; a package folder must be at the pin")
    with target_lock(target):
        if not target.is_git:
            _refuse_interrupted(target)
        with make_plan(target, series, pin, three_way=args.three_way) as plan:
            if plan.all_applied:
                say(f"already applied: all {len(plan.states)} patches are in {target.describe()}")
                return 0
            if not target.is_git and journal.read_journal(target.root):
                raise FatalError(
                    f"{target.root} carries an earlier apply of another series; run `make revert SGLANG={target.root}` first"
                )
            _refuse_unless_ready(plan, pin.release, args.three_way)
            if target.is_git:
                branch = _apply_to_checkout(plan, args.branch or f"sglpatch/{pin.tag}")
                where = f"branch {branch}"
            else:
                _apply_to_package(plan, series.digest())
                where = "package folder (journal in .sglpatch/; `make revert` puts it back)"
    applied = [s.patch.name for s in plan.to_apply]
    skipped = len(plan.states) - len(applied)
    note = f", {skipped} already there" if skipped else ""
    say(f"applied {len(applied)} patches to {target.root} on {where}{note} in {time.monotonic() - started:.1f} s")
    return 0


def _refuse_interrupted(target: Target) -> None:
    state = journal.read_journal(target.root)
    if state and state["state"] == journal.APPLYING:
        raise FatalError(
            f"an interrupted apply left {target.root} half-written; run `make revert SGLANG={target.root}` first"
        )


def _refuse_unless_ready(plan: Plan, release: str, three_way: bool) -> None:
    if plan.dirty:
        raise FatalError(
            f"files the series touches have uncommitted changes: {', '.join(plan.dirty)}; commit or stash them first"
        )
    if plan.drift and not three_way:
        hint = "; try --3way" if plan.target.is_git else ""
        raise FatalError(
            f"base differs from the pin (sglang {release}) in {plural(len(plan.drift), 'file')}: {', '.join(plan.drift)}{hint}"
        )
    if plan.conflicts:
        raise FatalError(f"{plan.conflicts[0].failure.describe()}; nothing was changed")


def _apply_to_checkout(plan: Plan, branch: str) -> str:
    git = plan.target.git
    if git.rev_parse(f"refs/heads/{branch}") is not None:
        raise FatalError(f"branch {branch} already exists; pass --branch NAME (BRANCH=NAME) or delete it")
    head = git.run("rev-parse", "HEAD")
    previous = git.current_branch() or head
    committer = _identity(git)
    parent = head
    for state in plan.to_apply:
        parent = plan.workspace.commit(state.patch, state.tree, parent, committer)
    plan.workspace.git.run("update-ref", "refs/heads/series", parent)
    git.run("fetch", "-q", "--no-tags", str(plan.workspace.root), f"refs/heads/series:refs/heads/{branch}")
    status, _, err = git.try_run("checkout", "-q", branch)
    if status != 0:
        git.run("branch", "-D", branch)
        raise FatalError(f"could not switch to {branch}: {err.strip()}; the branch was removed, nothing else changed")
    record = {
        "branch": branch,
        "previous": previous,
        "head": parent,
        "patches": [s.patch.name for s in plan.states],
        "touched": sorted({p for s in plan.states for p in s.patch.touched_paths}),
    }
    (git.git_dir() / STATE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return branch


def _identity(git) -> tuple[str, str] | None:
    status_n, name, _ = git.try_run("config", "user.name")
    status_e, email, _ = git.try_run("config", "user.email")
    return (name, email) if status_n == 0 and status_e == 0 else None


def _apply_to_package(plan: Plan, digest: str) -> None:
    target = plan.target
    paths = [p for s in plan.to_apply for p in s.patch.touched_paths]
    before = target.read_files(list(dict.fromkeys(paths)))
    changes = []
    for path, old in before.items():
        new = plan.workspace.read(path)
        if new != old:
            changes.append(journal.Change(target.local_path(path), old, new))
    names = [s.patch.name for s in plan.states if s.state != APPLIED]
    journal.write_changes(target.root, changes, digest, names)
