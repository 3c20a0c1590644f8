"""`sglpatch check-patches` (`make check-patches`): each patch's own tests fail without it, and every prefix
of the series passes the tests of all its patches. A DeepGEMM line's check is its kernel's compile instead:
every prefix compiles the SM90 paged-MQA kernel for sm_90a (rebase/kernel_prefixes.py).

Per series line (--line, default: every line). For patch k, the CPU tests its
`Tests:` trailer names (those under the line's tests folder: tests/patched for the
default line, tests/patched_<line> for the others) run, in a pytest process of
their own pointed at the tree by the line's variable, against a real tree made from the pinned base with patches 1..k-1: they
must fail (the tests see the patch). Then the tests of patches 1..k run on the
tree with patches 1..k: they must all pass, so every prefix is correct on its
own (a bisect or a user who takes only the first patches gets a working tree),
not only the new patch's behaviour. Trees are temporary git worktrees of the
line's default base (built from its pin when missing); nothing else is touched.
"Fail" means the tests ran and failed (pytest exit 1, with failures): tests that cannot
even be collected without the patch (an import error: exit 2), or that find nothing to
run, prove nothing about it, and the patch fails its check.
The pytest runs are independent (a tree and a process each), so --jobs of them
run at once (default: the CPU count, at most 4: each imports sglang and torch, about
1 GB); the verdicts print in series order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from sglpatch import hints
from sglpatch.commands.common import EVERY_LINE, add_series_options
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.lines import TREE_ENV, Line, all_lines, default_line, line_named
from sglpatch.output import plural, progress, say
from sglpatch.pin import Pin, load_pin
from sglpatch.project import PROJECT_ROOT
from sglpatch.rebase.default_base import ensure_default_base
from sglpatch.rebase.kernel_prefixes import check_line
from sglpatch.rebase.replay import prefix_worktrees
from sglpatch.series import Patch, Series, load_series

CHECK_REF = "refs/sglpatch/check/series"


DEFAULT_JOBS = max(1, min(4, os.cpu_count() or 1))


def add_arguments(parser) -> None:
    add_series_options(parser, line_default=EVERY_LINE)
    parser.add_argument(
        "--jobs", type=int, default=DEFAULT_JOBS, help=f"pytest runs at once (default here: {DEFAULT_JOBS})"
    )


def run(args) -> int:
    if args.jobs < 1:
        raise FatalError(
            f"{hints.option(f'--jobs {args.jobs}', f'JOBS={args.jobs}')}: give 1 or more pytest runs at once"
        )
    if args.patches:  # a series folder, on the default line's base (a DeepGEMM one: on its pin's own base)
        pin = load_pin(args.patches)
        line = Line(pin.tag, args.patches, project=pin.project) if pin.project.from_git else default_line()
        checks = [(line, load_series(args.patches), pin)]
    else:
        lines = [line_named(args.line)] if args.line else all_lines()
        checks = [(line, load_series(line.directory, project=line.project), line.pin()) for line in lines]
    failed = [
        f"line {line.name}: {failures} of {len(series.patches)} patches"
        for line, series, pin in checks
        if (failures := _check_line(line, series, pin, args.jobs))
    ]
    if failed:
        raise FatalError(f"{'; '.join(failed)} fail their own check (see above)")
    return 0


def _check_line(line: Line, series: Series, pin: Pin, jobs: int) -> int:
    """The check of one line's series on its default base; the number of patches that fail it."""
    if line.project.from_git:  # DeepGEMM: each prefix's kernel compiles for sm_90a (no CPU tests of its own)
        say(f"== line {line.name}: {len(series.patches)} patches, each prefix's SM90 paged-MQA kernel for sm_90a")
        return check_line(line.name, line.default_base, series, pin)
    say(
        f"== line {line.name}: {plural(len(series.patches), 'patch')}, tests in {line.tests_dir.relative_to(PROJECT_ROOT)}"
    )
    git = Git(ensure_default_base(pin, line.default_base))
    with prefix_worktrees(git, pin.tag, series.patches, CHECK_REF, scratch="sglpatch-check-") as trees:
        failures = _check_patches(line, series.patches, trees, jobs)
    if failures:
        return failures
    say(
        f"line {line.name}: every patch's tests fail without it, and every prefix passes the tests of its patches "
        f"({plural(len(series.patches), 'patch')})"
    )
    return 0


def _check_patches(line: Line, patches: list[Patch], trees: list[Path], jobs: int) -> int:
    """For each patch k: its own tests fail on trees[k-1], and the tests of patches 1..k pass on trees[k].
    Returns how many patches fail that."""
    folder = f"{line.tests_dir.relative_to(PROJECT_ROOT)}/"
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        runs: list[tuple[list[str], Future | None, Future | None]] = []
        for k, patch in enumerate(patches, 1):
            own = _cpu_tests(patch, folder)
            suite = list(dict.fromkeys(test for earlier in patches[:k] for test in _cpu_tests(earlier, folder)))
            if own:
                runs.append(
                    (own, pool.submit(_pytest, line, own, trees[k - 1]), pool.submit(_pytest, line, suite, trees[k]))
                )
            else:
                runs.append((own, None, None))
        started = 2 * sum(1 for own, _, _ in runs if own)
        progress(f"{plural(started, 'pytest run')} on {len(trees)} trees, {jobs} at a time")
        failures = 0
        for k, (patch, (own, without, with_patch)) in enumerate(zip(patches, runs, strict=True), 1):
            if without is None or with_patch is None:
                say(f"{patch.name}: FAIL: its Tests trailer names no CPU test under {folder}")
                failures += 1
                continue
            progress(f"{patch.name}: {', '.join(own)}")
            before, after = without.result(), with_patch.result()
            verdict = "ok" if _failed_on_its_tests(before) and after[0] == 0 else "FAIL"
            say(f"{patch.name}: {_without_it(before)}; with patches 1-{k}, their tests: {after[1]}  [{verdict}]")
            failures += verdict != "ok"
    finally:  # on Ctrl-C: the runs under way end with it (the terminal's signal reaches them), none starts
        pool.shutdown(wait=True, cancel_futures=True)
    return failures


# pytest's exit statuses other than 0 (all passed) and 1 (some failed): the tests did not run, or not all
_DID_NOT_RUN = {
    2: "errors during collection",
    3: "pytest's internal error",
    4: "a pytest usage error",
    5: "no tests collected",
}


def _failed_on_its_tests(run: tuple[int, str]) -> bool:
    """The tests ran and some failed: pytest exit 1 with failures (not errors alone, not a run that never ran)."""
    return run[0] == 1 and " failed" in f" {run[1]}"


def _without_it(run: tuple[int, str]) -> str:
    """How the patch's tests did on the tree without it, as the verdict line says it."""
    if run[0] == 0 or _failed_on_its_tests(run):  # passed (the verdict says FAIL), or failed as it must
        return f"without it: {run[1]}"
    why = "errors, no failure" if run[0] == 1 else _DID_NOT_RUN.get(run[0], f"pytest exit {run[0]}")
    return (
        f"without it its tests did not run and fail ({run[1]}: {why}), so they prove nothing: "
        "they must run and fail on an assertion"
    )


def _cpu_tests(patch: Patch, folder: str) -> list[str]:
    return [t for t in patch.tests if t.startswith(folder)]


def _pytest(line: Line, tests: list[str], tree: Path) -> tuple[int, str]:
    env = {**os.environ, TREE_ENV: str(tree / "python"), line.tree_env: str(tree / "python")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [
        line.strip("= ")
        for line in result.stdout.splitlines()
        if " in " in line and any(word in line for word in ("passed", "failed", "error", "no tests ran"))
    ]
    return result.returncode, (lines[-1] if lines else f"pytest exited {result.returncode}")
