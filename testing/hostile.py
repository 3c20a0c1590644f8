"""What the hostile-environment tests share: the CLI run without root's override of file modes, read-only
trees, and the two outcomes every such test checks (a clean refusal, or a named state).

As root the CLI runs under `capsh --drop=cap_dac_override`; as an ordinary user the modes alone do it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from testing.fault_harness import Lab, default_sigint, diff_states, run_state

CAPSH = shutil.which("capsh")
UNSHARE = shutil.which("unshare")
# In a mount namespace of its own (nothing outside sees it): `folder` bind-mounted read-only onto itself, then
# the command; the read-only file system of a mounted image or container layer.
_READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'


def without_override(lab: Lab, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The CLI as a process that file modes apply to (no CAP_DAC_OVERRIDE)."""
    command = [sys.executable, "-m", "sglpatch", *map(str, args)]
    if os.geteuid() == 0:
        if CAPSH is None:
            pytest.skip("running as root without capsh: cannot drop CAP_DAC_OVERRIDE to make modes bite")
        command = [CAPSH, "--drop=cap_dac_override", "--", "-c", 'exec "$0" "$@"', *command]
    return subprocess.run(
        command, capture_output=True, text=True, env=lab.env(**env), timeout=120, preexec_fn=default_sigint
    )


def on_read_only_mount(lab: Lab, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI with `folder` on a read-only file system (EROFS: no mode or capability lets a write through)."""
    if UNSHARE is None or subprocess.run([UNSHARE, "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no `unshare -rm` here (user and mount namespaces): cannot mount a folder read-only")
    command = [UNSHARE, "-rm", "sh", "-c", _READ_ONLY_MOUNT, str(folder), sys.executable, "-m", "sglpatch"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, env=lab.env(), timeout=120)


def read_only(folder: Path, *, skip_git: bool = False) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            if skip_git and ".git" in path.relative_to(folder).parts:
                continue
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def writable(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def assert_refused(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


def assert_state(lab: Lab, run, state: str) -> None:
    got = run_state(run)
    assert got == lab.reference(state), diff_states(got, lab.reference(state))
