"""The CLI in a child process, so that a kill at one of its write points ends the child, not the test; and the
write point right after apply's switch to the series branch, found by a traced run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SWITCHED = "checkout: switched to the branch"


def python_child(*args, **env) -> subprocess.CompletedProcess:
    """``python ARGS`` in a child process, `env` added to the test's environment."""
    return subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **{key: str(value) for key, value in env.items()}},
        timeout=120,
    )


def cli_child(*args, **env) -> subprocess.CompletedProcess:
    """The CLI in a child process (a kill ends it, not the test), `env` added to the test's environment."""
    return python_child("-m", "sglpatch", *args, **env)


def point_after(trace: Path, label: str) -> int:
    """The number SGLPATCH_FAULT_AT takes to stop at the write point ``label`` of a run SGLPATCH_FAULT_TRACE traced."""
    return [line.split("\t")[1] for line in trace.read_text().splitlines()].index(label) + 1


def apply_and_its_switch_point(checkout: Path, patches: Path, tmp_path: Path) -> tuple[list, int]:
    """Apply's command line and the write point right after its switch: a traced apply, then its revert."""
    trace = tmp_path / "trace"
    apply = ["apply", "--sglang", checkout, "--patches", patches]
    assert cli_child(*apply, SGLPATCH_FAULT_TRACE=trace).returncode == 0
    assert cli_child("revert", "--sglang", checkout).returncode == 0
    return apply, point_after(trace, SWITCHED)


def clean_cut_short(sglpatch, rmtree) -> None:
    """`sglpatch clean` in this process with shutil.rmtree replaced by `rmtree`, whose KeyboardInterrupt stands in
    for a kill: what the clean did before it stays, nothing after."""
    from sglpatch.commands import clean

    real_rmtree = clean.shutil.rmtree
    clean.shutil.rmtree = rmtree
    try:
        sglpatch("clean")
    except KeyboardInterrupt:
        pass
    finally:
        clean.shutil.rmtree = real_rmtree
