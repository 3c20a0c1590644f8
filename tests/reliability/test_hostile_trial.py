"""The hostile trial of issue 24 (part B): user files in the way, modes, stale bytecode, CRLF, odd headers.

Each case runs the real CLI on real v0.5.14 trees and compares them byte for byte
(`fault_harness.tree_state`: content and mode of every file, `.git` refs, state
files and index entries): exit 0 and the state the tool names, or one line on
stderr, exit 2, no traceback, and the tree exactly as it was.
"""

from __future__ import annotations

import subprocess

import pytest

from testing.fault_harness import tree_state
from testing.sglang_trees import NEW_FILE

KINDS = ["checkout", "package"]


@pytest.fixture(params=KINDS)
def target(request, checkout, package):
    return {"checkout": checkout, "package": package}[request.param]


def local(target, upstream_path: str):
    """A series path (upstream layout) inside a checkout or a package folder."""
    if (target / ".git").exists():
        return target / upstream_path
    return target / upstream_path.removeprefix("python/sglang/")


def refused(sglpatch, target, *args, command="apply"):
    """Run a command that must refuse: one line, exit 2, no traceback, the tree as it was."""
    before = tree_state(target)
    code, out, err = sglpatch(command, "--sglang", target, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert tree_state(target) == before
    return err


# -- defect 1: a user file at a path the series creates ---------------------------------


def test_a_user_file_where_the_series_creates_one_is_refused_not_overwritten(sglpatch, target, patches):
    """In a checkout the file is git-ignored (git checkout overwrites ignored files, and revert deleted it)."""
    mine = local(target, NEW_FILE)
    mine.write_text("MINE\n")
    if (target / ".git").exists():
        with open(target / ".git" / "info" / "exclude", "a") as exclude:
            exclude.write(f"/{NEW_FILE}\n")
        assert not subprocess.run(["git", "status", "--porcelain"], cwd=target, capture_output=True).stdout
    err = refused(sglpatch, target, "--patches", patches)
    assert str(mine) in err and "the series creates it" in err, err
    assert mine.read_text() == "MINE\n"


def test_an_untracked_file_where_the_series_creates_one_is_kept(sglpatch, checkout, patches):
    mine = checkout / NEW_FILE
    mine.write_text("MINE\n")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert str(mine) in err, err
