"""`sglpatch check`: each patch's own tests fail without it, and every prefix
of the series passes the tests of all its patches.

For patch k, the CPU tests its `Tests:` trailer names (those under tests/patched)
run against a real tree made from the pinned base with patches 1..k-1: they
must fail (the tests see the patch). Then the tests of patches 1..k run on the
tree with patches 1..k: they must all pass, so every prefix is correct on its
own (a bisect or a user who takes only the first patches gets a working tree),
not only the new patch's behaviour. Trees are temporary git worktrees of the
default base; nothing else is touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sglpatch.commands.common import add_series_options, load_inputs
from sglpatch.default_base import ensure_default_base
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.output import progress, say
from sglpatch.project import PROJECT_ROOT, default_base_dir
from sglpatch.replay import series_commits
from sglpatch.series import Patch

CHECK_REF = "refs/sglpatch/check/series"


def add_arguments(parser) -> None:
    add_series_options(parser)


def run(args) -> int:
    series, pin = load_inputs(args)
    git = Git(ensure_default_base(pin, default_base_dir()))
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
                failures += _check_patch(series.patches[:k], trees[k - 1], trees[k])
        finally:
            for tree in trees:
                git.try_run("worktree", "remove", "--force", str(tree))
            git.try_run("update-ref", "-d", CHECK_REF)
    if failures:
        raise FatalError(f"{failures} of {len(series.patches)} patches fail their own check (see above)")
    say(
        f"every patch's tests fail without it, and every prefix passes the tests of its patches "
        f"({len(series.patches)} patches)"
    )
    return 0


def _worktree(git: Git, rev: str, path: Path) -> Path:
    git.run("worktree", "add", "-q", "--detach", str(path), rev)
    return path


def _check_patch(prefix: list[Patch], without: Path, with_patch: Path) -> int:
    """Patch prefix[-1]'s tests fail on `without`; the tests of all of prefix pass on `with_patch`."""
    patch = prefix[-1]
    own = _cpu_tests(patch)
    if not own:
        say(f"{patch.name}: FAIL: its Tests trailer names no CPU test under tests/patched/")
        return 1
    suite = list(dict.fromkeys(test for earlier in prefix for test in _cpu_tests(earlier)))
    progress(f"{patch.name}: {', '.join(own)}")
    before = _pytest(own, without)
    after = _pytest(suite, with_patch)
    verdict = "ok" if before[0] != 0 and after[0] == 0 else "FAIL"
    say(f"{patch.name}: without it: {before[1]}; with patches 1-{len(prefix)}, their tests: {after[1]}  [{verdict}]")
    return 0 if verdict == "ok" else 1


def _cpu_tests(patch: Patch) -> list[str]:
    return [t for t in patch.tests if t.startswith("tests/patched/")]


def _pytest(tests: list[str], tree: Path) -> tuple[int, str]:
    env = {**os.environ, "SGLPATCH_SGLANG_TREE": str(tree / "python")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [
        line.strip("= ")
        for line in result.stdout.splitlines()
        if " in " in line and ("passed" in line or "failed" in line)
    ]
    return result.returncode, (lines[-1] if lines else f"pytest exited {result.returncode}")
