"""`sglpatch check-patches` (`make check-patches`): each patch's own tests fail without it, and every prefix
of the series passes the tests of all its patches.

Per series line (--line, default: every line). For patch k, the CPU tests its
`Tests:` trailer names (those under the line's tests folder: tests/patched for the
default line, tests/patched_<line> for the others) run, in a pytest process of
their own pointed at the tree by the line's variable, against a real tree made from the pinned base with patches 1..k-1: they
must fail (the tests see the patch). Then the tests of patches 1..k run on the
tree with patches 1..k: they must all pass, so every prefix is correct on its
own (a bisect or a user who takes only the first patches gets a working tree),
not only the new patch's behaviour. Trees are temporary git worktrees of the
line's default base (built from its pin when missing); nothing else is touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sglpatch.commands.common import add_series_options
from sglpatch.default_base import ensure_default_base
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.lines import TREE_ENV, Line, all_lines, default_line, line_named
from sglpatch.output import progress, say
from sglpatch.pin import Pin, load_pin
from sglpatch.project import PROJECT_ROOT
from sglpatch.replay import series_commits
from sglpatch.series import Patch, Series, load_series

CHECK_REF = "refs/sglpatch/check/series"


def add_arguments(parser) -> None:
    add_series_options(parser)


def run(args) -> int:
    if args.patches:  # a series folder, on the default line's base
        checks = [(default_line(), load_series(args.patches), load_pin(args.patches))]
    else:
        lines = [line_named(args.line)] if args.line else all_lines()
        checks = [(line, load_series(line.directory), line.pin()) for line in lines]
    failed = [
        f"line {line.name}: {failures} of {len(series.patches)} patches"
        for line, series, pin in checks
        if (failures := _check_line(line, series, pin))
    ]
    if failed:
        raise FatalError(f"{'; '.join(failed)} fail their own check (see above)")
    return 0


def _check_line(line: Line, series: Series, pin: Pin) -> int:
    """The check of one line's series on its default base; the number of patches that fail it."""
    say(f"== line {line.name}: {len(series.patches)} patches, tests in {line.tests_dir.relative_to(PROJECT_ROOT)}")
    git = Git(ensure_default_base(pin, line.default_base))
    commits = series_commits(git, pin.tag, series.patches)
    try:
        commits.workspace.copy_commit_to(commits.commits[-1], git, CHECK_REF)
    finally:
        commits.workspace.close()
    prefixes = [commits.base, *commits.commits]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="sglpatch-check-") as tmp:
        trees = [_worktree(git, rev, Path(tmp) / f"prefix-{k}") for k, rev in enumerate(prefixes)]
        try:
            for k in range(1, len(series.patches) + 1):
                failures += _check_patch(line, series.patches[:k], trees[k - 1], trees[k])
        finally:
            for tree in trees:
                git.try_run("worktree", "remove", "--force", str(tree))
            git.try_run("update-ref", "-d", CHECK_REF)
    if failures:
        return failures
    say(
        f"line {line.name}: every patch's tests fail without it, and every prefix passes the tests of its patches "
        f"({len(series.patches)} patches)"
    )
    return 0


def _worktree(git: Git, rev: str, path: Path) -> Path:
    git.run("worktree", "add", "-q", "--detach", str(path), rev)
    return path


def _check_patch(line: Line, prefix: list[Patch], without: Path, with_patch: Path) -> int:
    """Patch prefix[-1]'s tests fail on `without`; the tests of all of prefix pass on `with_patch`."""
    patch = prefix[-1]
    folder = f"{line.tests_dir.relative_to(PROJECT_ROOT)}/"
    own = _cpu_tests(patch, folder)
    if not own:
        say(f"{patch.name}: FAIL: its Tests trailer names no CPU test under {folder}")
        return 1
    suite = list(dict.fromkeys(test for earlier in prefix for test in _cpu_tests(earlier, folder)))
    progress(f"{patch.name}: {', '.join(own)}")
    before = _pytest(line, own, without)
    after = _pytest(line, suite, with_patch)
    verdict = "ok" if before[0] != 0 and after[0] == 0 else "FAIL"
    say(f"{patch.name}: without it: {before[1]}; with patches 1-{len(prefix)}, their tests: {after[1]}  [{verdict}]")
    return 0 if verdict == "ok" else 1


def _cpu_tests(patch: Patch, folder: str) -> list[str]:
    return [t for t in patch.tests if t.startswith(folder)]


def _pytest(line: Line, tests: list[str], tree: Path) -> tuple[int, str]:
    env = {**os.environ, TREE_ENV: str(tree / "python"), line.tree_env: str(tree / "python")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [
        line.strip("= ")
        for line in result.stdout.splitlines()
        if " in " in line and ("passed" in line or "failed" in line)
    ]
    return result.returncode, (lines[-1] if lines else f"pytest exited {result.returncode}")
