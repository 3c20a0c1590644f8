"""`sglpatch export`: write the series folder from commits in a git repo.

The commits BASE..HEAD become the series folder's files; see series_writer.py
for what is written and in which order.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.output import say
from sglpatch.pin import PIN_FILE, load_pin
from sglpatch.project import default_patch_dir
from sglpatch.series import SUMS_FILE, refuse_half_rewritten
from sglpatch.series_writer import render_series, write_series_files


def add_arguments(parser) -> None:
    parser.add_argument("--from", dest="repo", required=True, type=Path, help="git repo holding the series as commits")
    parser.add_argument("--base", required=True, help="the commit the series sits on (the pinned release)")
    parser.add_argument("--head", default="HEAD", help="last commit of the series (default HEAD)")
    parser.add_argument(
        "--patches",
        type=Path,
        default=None,
        metavar="DIR",
        help="series folder to write (default: the default line, patches/<oldest tag>/)",
    )


def run(args) -> int:
    out_dir = args.patches or default_patch_dir()
    repo = Git(args.repo)
    for rev in (args.base, args.head):
        if repo.rev_parse(rev) is None:
            raise FatalError(f"{args.repo}: no commit {rev}")
    refuse_half_rewritten(out_dir)
    pin = load_pin(out_dir)
    files = render_series(repo, args.base, args.head, pin)
    write_series_files(out_dir, files)
    say(f"wrote {len(files) - 3} patches, series, {SUMS_FILE} and {PIN_FILE} to {out_dir}")
    return 0
