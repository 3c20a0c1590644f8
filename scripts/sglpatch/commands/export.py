"""`sglpatch export`: write the series folder from commits in a git repo.

The commits BASE..HEAD become the series folder's files; see series_writer.py
for what is written and in which order.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.lines import default_patch_dir, line_named
from sglpatch.message_format import missing_parts
from sglpatch.output import plural, say
from sglpatch.pin import PIN_FILE, load_pin
from sglpatch.series import SUMS_FILE, parse_patch, refuse_half_rewritten
from sglpatch.series_writer import (
    listed_patches,
    refuse_changed_listed,
    refuse_unlisted_in_the_way,
    render_series,
    write_series_files,
)


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
    _refuse_incomplete_messages(repo, base, args.head, files, pin.project)
    listed = listed_patches(out_dir)
    refuse_unlisted_in_the_way(out_dir, files, listed)
    refuse_changed_listed(out_dir, files, listed)
    write_series_files(out_dir, files, listed)
    say(f"wrote {len(files) - 3} patches, series, {SUMS_FILE} and {PIN_FILE} to {out_dir}")
    return 0


def _refuse_incomplete_messages(repo: Git, base: str, head: str, files: dict[str, bytes], project) -> None:
    """The first commit whose message lacks what the series format requires, named in one line."""
    patches = [parse_patch(name, data, project=project) for name, data in files.items() if name.endswith(".patch")]
    commits = repo.run("rev-list", "--reverse", "--no-merges", "--topo-order", f"{base}..{head}").split()
    named = zip(commits, patches, strict=True) if len(commits) == len(patches) else ((None, p) for p in patches)
    incomplete = [(commit, patch, missing) for commit, patch in named if (missing := missing_parts(patch))]
    if incomplete:
        commit, patch, missing = incomplete[0]
        others = f" (and {plural(len(incomplete) - 1, 'more commit')})" if len(incomplete) > 1 else ""
        raise FatalError(
            f"commit {commit[:12] if commit else patch.name} ({patch.subject}) lacks {', '.join(missing)}{others}: "
            "every patch's message needs them (docs/series-format.md, \"A patch's message\"); "
            "amend it (`git commit --amend`, or `git rebase -i`), then export again; nothing was written"
        )
