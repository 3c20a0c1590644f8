"""`sglpatch check`: each patch's own tests fail without it and pass with it.

For patch k, the CPU tests its `Tests:` trailer names (those under tests/patched)
run twice against real trees made from the pinned base: with patches 1..k-1
(they must fail: the tests see the patch) and with patches 1..k (they must
pass). Trees are temporary git worktrees of the default base; nothing else is
touched.
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
            for k, patch in enumerate(series.patches, 1):
                failures += _check_patch(patch, trees[k - 1], trees[k])
        finally:
            for tree in trees:
                git.try_run("worktree", "remove", "--force", str(tree))
            git.try_run("update-ref", "-d", CHECK_REF)
    if failures:
        raise FatalError(f"{failures} of {len(series.patches)} patches fail their own check (see above)")
    say(f"every patch's tests fail without it and pass with it ({len(series.patches)} patches)")
    return 0


def _worktree(git: Git, rev: str, path: Path) -> Path:
    git.run("worktree", "add", "-q", "--detach", str(path), rev)
    return path


def _check_patch(patch: Patch, without: Path, with_patch: Path) -> int:
    tests = [t.strip() for t in (patch.trailer("tests") or "").split(",") if t.strip().startswith("tests/patched/")]
    if not tests:
        say(f"{patch.name}: FAIL: its Tests trailer names no CPU test under tests/patched/")
        return 1
    progress(f"{patch.name}: {', '.join(tests)}")
    before = _pytest(tests, without)
    after = _pytest(tests, with_patch)
    verdict = "ok" if before[0] != 0 and after[0] == 0 else "FAIL"
    say(f"{patch.name}: without it: {before[1]}; with it: {after[1]}  [{verdict}]")
    return 0 if verdict == "ok" else 1


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
