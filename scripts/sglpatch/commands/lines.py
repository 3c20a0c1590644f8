"""`sglpatch lines`: the series lines under patches/, each with its base, its tests and what is upstream."""

from __future__ import annotations

from sglpatch import project
from sglpatch.lines import all_lines
from sglpatch.output import say
from sglpatch.series import load_series


def add_arguments(parser) -> None:
    parser.add_argument(
        "--test-folders",
        action="store_true",
        help="print '<line> <tests folder>' for each line, but the default one, whose CPU tests folder exists "
        "(what `make test` runs in a pytest process of its own)",
    )


def run(args) -> int:
    lines = all_lines()
    if args.test_folders:
        for line in lines:
            if not line.is_default and line.tests_dir.is_dir():
                say(f"{line.name} {line.tests_dir.relative_to(project.PROJECT_ROOT)}")
        return 0
    for line in lines:
        series = load_series(line.directory, project=line.project)
        role = " (default)" if line.is_default else ""
        upstream = len(line.upstreamed())
        say(f"{line.name}{role}: {len(series.patches)} patches in {line.directory.relative_to(project.PROJECT_ROOT)}")
        say(f"  project:      {line.project.upstream} ({line.pin().describe()})")
        say(f"  default base: {line.default_base.relative_to(project.PROJECT_ROOT)}")
        if line.project.from_git:  # its check compiles the kernel: no CPU tests folder
            say("  check:        each prefix's SM90 paged-MQA kernel compiled for sm_90a (make check-patches)")
            continue
        tests = line.tests_dir.relative_to(project.PROJECT_ROOT)
        say(f"  CPU tests:    {tests}{'' if line.tests_dir.is_dir() else ' (none yet)'} (tree: ${line.tree_env})")
        if upstream:
            say(f"  upstream:     {upstream} patches of an earlier line ({line.directory.name}/upstream.json)")
    return 0
