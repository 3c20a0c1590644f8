"""`sglpatch export`: write the series folder from commits in a git repo.

The commits BASE..HEAD become the series folder's files; see series_writer.py
for what is written and in which order.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.lines import line_named
from sglpatch.output import say
from sglpatch.pin import PIN_FILE, load_pin
from sglpatch.project import default_patch_dir
from sglpatch.series import SUMS_FILE, refuse_half_rewritten
from sglpatch.series_writer import render_series, write_series_files


def add_arguments(parser) -> None:
    parser.add_argument("--from", dest="repo", required=True, type=Path, help="git repo holding the series as commits")
    parser.add_argument(
        "--base",
        default=None,
        help="the commit the series sits on (the pinned release; default with --line: the line's tag)",
    )
    parser.add_argument(
        "--line",
        default=None,
        help="the series line to write (patches/<line>/, based on its tag), e.g. v0.5.23",
    )
    parser.add_argument("--head", default="HEAD", help="last commit of the series (default HEAD)")
    parser.add_argument(
        "--patches",
        type=Path,
        default=None,
        metavar="DIR",
        help="series folder to write (default: the default line, patches/<oldest tag>/)",
    )


def run(args) -> int:
    line = line_named(args.line) if args.line else None
    out_dir = args.patches or (line.directory if line else default_patch_dir())
    base = args.base or (line.name if line else None)
    if base is None:
        raise FatalError("export needs --base (the pinned release's commit) or --line")
    repo = Git(args.repo)
    for rev in (base, args.head):
        if repo.rev_parse(rev) is None:
            raise FatalError(f"{args.repo}: no commit {rev}")
    refuse_half_rewritten(out_dir)
    pin = load_pin(out_dir)
    files = render_series(repo, base, args.head, pin)
    write_series_files(out_dir, files)
    say(f"wrote {len(files) - 3} patches, series, {SUMS_FILE} and {PIN_FILE} to {out_dir}")
    return 0
