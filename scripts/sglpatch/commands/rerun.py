"""`sglpatch rerun`: per PR group of the series, the sglang CI comments that rerun the upstream
tests its files affect, and the commands that run the same tests on one machine."""

from __future__ import annotations

import sys
from pathlib import Path

from sglpatch.commands.common import NEWEST_LINE, add_series_options
from sglpatch.lines import line_named, newest_line
from sglpatch.output import say
from sglpatch.series import load_series
from sglpatch.upstream.pr_groups import group_patches
from sglpatch.upstream.rerun import load_rerun_map, local_commands, plan_reruns, rerun_comment_lines


def add_arguments(parser) -> None:
    add_series_options(parser, line_default=NEWEST_LINE)
    parser.add_argument("--map", type=Path, default=None, metavar="FILE", help="default: ci/rerun-map.json")
    parser.add_argument("--labeled", action="store_true", help="the PRs already carry the run-ci label")
    parser.add_argument("--failed", action="store_true", help="a CI run failed: add /rerun-failed-ci")
    parser.add_argument(
        "--sglang", default="$SGLANG", metavar="PATH", help="sglang checkout named in the local commands"
    )


def run(args) -> int:
    series = load_series(args.patches or (line_named(args.line) if args.line else newest_line()).directory)
    rerun_map = load_rerun_map(args.map)
    unmapped_total: list[str] = []
    groups = group_patches(series.patches)
    for number, (group, patches) in enumerate(groups, 1):
        plan = plan_reruns(patches, rerun_map)
        upstream = _cited_prs(patches)
        names = ", ".join(p.name.split("-", 1)[0] for p in patches)
        say(f"== PR {number}/{len(groups)}: {group} (patches {names}{upstream})")
        if plan.unmapped:
            unmapped_total += plan.unmapped
            for path in plan.unmapped:
                print(f"unmapped: {path} (no rule in the rerun map)", file=sys.stderr)
            continue
        for line in rerun_comment_lines(patches, labeled=args.labeled, ci_failed=args.failed, rerun_map=rerun_map):
            say(line)
        for line in local_commands(plan.tests, rerun_map, args.sglang):
            say(f"local: {line}")
    if unmapped_total:
        print(
            f"sglpatch rerun: error: {len(unmapped_total)} touched path(s) map to no upstream test: "
            f"{', '.join(unmapped_total)}",
            file=sys.stderr,
        )
        return 2
    return 0


def _cited_prs(patches) -> str:
    """'; upstream #N' for the PRs the group carries, '; extends #N' for those it only extends."""
    carried = sorted({p.trailer("upstream-pr") for p in patches} - {None})
    extended = sorted({p.trailer("extends-pr") for p in patches} - {None})
    parts = [
        f"upstream #{', #'.join(carried)}" if carried else "",
        f"extends #{', #'.join(extended)}" if extended else "",
    ]
    return "".join(f"; {part}" for part in parts if part)
