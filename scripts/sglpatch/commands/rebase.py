"""`sglpatch rebase`: carry the series onto a newer sglang in a git checkout (engine: rebase/rebase_engine.py)."""

from __future__ import annotations

from pathlib import Path

from sglpatch import hints
from sglpatch.commands.common import (
    CHECKOUT,
    add_series_options,
    add_target_option,
    chosen_line,
    load_line,
    resolve_target,
)
from sglpatch.errors import FatalError
from sglpatch.project import PROJECT_ROOT
from sglpatch.rebase import rebase_engine
from sglpatch.targets import read_state, refuse_unless_settled, writing

# what a user says to the rebase: (the flag, the make variable), for hints.option
_OPTIONS = (
    ("--onto REF", "ONTO=REF"),
    ("--drop PATCHES", "DROP=N"),
    ("--continue", "CONTINUE=1"),
    ("--abort", "ABORT=1"),
)


def add_arguments(parser) -> None:
    add_target_option(parser, what=CHECKOUT)
    add_series_options(parser)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--onto", metavar="REF", help="tag, commit, or sglang release version (fetched from PyPI)")
    action.add_argument("--continue", dest="resume", action="store_true", help="go on after resolving a conflict")
    action.add_argument("--abort", action="store_true", help="put everything back as it was before the rebase")
    parser.add_argument(
        "--drop",
        metavar="PATCHES",
        help="leave patches out (numbers or names, comma-separated): with --onto from the start; "
        "alone, while the rebase is stopped (the patch it stopped at: skip it and go on)",
    )
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
    with writing(target, "rebase"):
        folder, state = rebase_engine.saved_state(target)
        if args.drop is not None and (args.abort or args.resume):
            drop, resume, abort = (hints.option(*pair) for pair in _OPTIONS[1:])
            raise FatalError(f"{drop} goes on by itself (no {resume} needed), and {abort} drops nothing")
        if args.abort:
            return rebase_engine.abort(target, folder, state)
        if args.resume:
            return rebase_engine.resume(target, folder, state)
        if args.onto is None and args.drop is not None:
            return rebase_engine.drop(target, folder, state, args.drop)
        if args.onto is None:
            onto, drop, resume, abort = (hints.option(*pair) for pair in _OPTIONS)
            raise FatalError(f"say what to do: {onto}, {resume}, {abort}, or {drop} while stopped")
        rebase_engine.refuse_in_progress(target)
        # as apply: an apply or revert cut short, or another tool's operation waiting (a cherry-pick of several
        # commits, a `git rebase -i` stopped at a break) is settled first, never built on
        refuse_unless_settled(read_state(target))
        line = chosen_line(args, target)
        series, pin = load_line(args, line)
        request = rebase_engine.Request(
            onto=args.onto,
            release=args.release,
            patch_dir=series.directory,
            report_dir=args.report_dir,
            drop_upstreamed=args.drop_upstreamed,
            check_imports=args.check_imports,
            drop=args.drop,
            lines_root=line.directory.parent if line else None,
        )
        return rebase_engine.start(target, folder, request, series, pin)
