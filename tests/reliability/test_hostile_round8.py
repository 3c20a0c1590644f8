"""The hostile trial of round 8: what the commands that write outside a target write over (`export`'s series
folder, `ci/gpu_bundle.py --out`), and what round 7 left untried (docs/reliability.md, round 8).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testing.tree_bytes import tree_state

ROOT = Path(__file__).resolve().parents[2]


def _gpu_bundle(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, ROOT / "ci" / "gpu_bundle.py", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("what", ["notes", "a series line"])
def test_gpu_bundle_does_not_delete_a_patches_folder_of_the_users_at_out(tmp_path, what):
    """Before: staging the patches began with `shutil.rmtree(OUT/patches)`, whatever was there: `--out` naming
    a project of the user's (or this repository's root, `--out .`) deleted its `patches/` folder, every file in
    it. Now only a folder a previous run staged (`series` and the files it lists) is replaced."""
    mine = tmp_path / "project" / "patches"
    mine.mkdir(parents=True)
    if what == "notes":
        (mine / "notes.txt").write_text("my notes\n")
        (mine / "0001-mine.patch").write_text("my own patch\n")
    else:
        (mine / "v0.5.14").mkdir()
        (mine / "v0.5.14" / "series").write_text("0001-a.patch\n")
    before = tree_state(tmp_path / "project")
    run = _gpu_bundle("--out", str(tmp_path / "project"), "--patches-only")
    assert run.returncode != 0 and run.stderr.count("\n") == 1, run.stderr
    assert f"{mine} is not a patches folder" in run.stderr and "nothing was changed" in run.stderr, run.stderr
    assert tree_state(tmp_path / "project") == before


def test_gpu_bundle_restages_its_own_patches_folder(tmp_path):
    """The guard above leaves a staged folder to the script: a second run replaces it."""
    out = tmp_path / "bundle"
    for _ in range(2):
        run = _gpu_bundle("--out", str(out), "--patches-only")
        assert run.returncode == 0, run.stderr
    staged = sorted(p.name for p in (out / "patches").iterdir())
    assert staged == sorted(["series", *(out / "patches" / "series").read_text().split()])
