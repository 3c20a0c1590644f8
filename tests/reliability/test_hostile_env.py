"""A hostile or unlucky environment (issue 16): read-only trees, writes that do not stick, odd target paths.

Each test runs the real CLI in a subprocess on real v0.5.14 trees (the fault
harness's labs) and checks the promise: exit 0 and the state the tool names, or
one line on stderr, exit 2, no traceback, and the tree byte for byte as it was.

Read-only trees need a process without root's override of file modes: as root
the CLI runs under `capsh --drop=cap_dac_override`; as an ordinary user the
modes alone do it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from testing.fault_harness import OPERATIONS, PATCHED, PRISTINE, default_sigint, make_labs, run_state
from testing.hostile import (
    assert_refused,
    assert_state,
    on_read_only_mount,
    read_only,
    without_override,
    writable,
)


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return make_labs(tmp_path_factory, base_repo, series_dir, "env")


# -- item 1: a git checkout that exits 0 without writing the files ----------------------


def test_apply_onto_a_read_only_work_tree_is_rolled_back_not_reported_as_applied(labs):
    """Work tree read-only, .git writable: `git checkout` says yes and leaves every file as it was."""
    lab = labs["checkout"]
    run = lab.fresh(PRISTINE)
    read_only(run.target, skip_git=True)
    try:
        result = without_override(lab, *["apply", "--sglang", run.target, "--patches", run.patches])
        assert_refused(result, "rolled back", "is as it was", "Permission denied")
    finally:
        writable(run.target)
    assert_state(lab, run, PRISTINE)


def test_revert_from_a_read_only_work_tree_stays_patched_and_says_so(labs):
    lab = labs["checkout"]
    run = lab.fresh(PATCHED)
    read_only(run.target, skip_git=True)
    try:
        assert_refused(
            without_override(lab, "revert", "--sglang", run.target), "nothing was changed", "still fully patched"
        )
    finally:
        writable(run.target)
    assert_state(lab, run, PATCHED)
    assert lab.sglpatch("revert", "--sglang", str(run.target)).returncode == 0
    assert_state(lab, run, PRISTINE)


def test_recover_does_not_call_a_branch_with_unwritten_files_fully_patched(labs):
    """What the old apply left behind: HEAD and index on the series branch, the files as they were."""
    lab = labs["checkout"]
    run = lab.fresh(PATCHED)
    pristine = lab.template(PRISTINE).target
    changed = 0
    for path in [p for p in run.target.rglob("*.py") if ".git" not in p.parts]:
        was = pristine / path.relative_to(run.target)
        if not was.exists():
            path.unlink()  # a file the series creates was never written
            changed += 1
        elif was.read_bytes() != path.read_bytes():
            path.write_bytes(was.read_bytes())
            changed += 1
    assert changed
    before = run_state(run)
    result = lab.sglpatch("recover", "--sglang", str(run.target))
    assert_refused(result, "differ from it", "nothing was changed")
    assert run_state(run) == before


def test_package_file_changed_under_the_apply_is_caught_and_rolled_back(labs):
    """A write that does not stick in a package folder (here: put back by someone else while apply runs)."""
    lab, apply = labs["package"], OPERATIONS["apply"]
    trace = lab.trace(apply)
    point = max(i for i, line in enumerate(trace, 1) if line.endswith(" replaced"))
    name = trace[point - 1].split("package: ", 1)[1].removesuffix(" replaced")
    run = lab.fresh(PRISTINE)
    first = subprocess.Popen(
        [sys.executable, "-m", "sglpatch", *apply.argv(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=lab.env(SGLPATCH_FAULT_AT=str(point), SGLPATCH_FAULT_SIGNAL="STOP"),
        preexec_fn=default_sigint,
    )
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "apply ended instead of stopping after its last file"
        pristine = lab.template(PRISTINE).target
        [victim] = [p for p in run.target.rglob(name) if p.is_file() and ".sglpatch" not in p.parts]
        victim.write_bytes((pristine / victim.relative_to(run.target)).read_bytes())
    finally:
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=120)
    assert_refused(subprocess.CompletedProcess(first.args, first.returncode, out, err), "is not what sglpatch wrote")
    assert "rolled back" in err and "is as it was" in err, err
    assert_state(lab, run, PRISTINE)


# -- item 3: read-only targets, without root's override: one line, exit 2, unchanged ----------


@pytest.mark.parametrize("kind", ["checkout", "package"])
@pytest.mark.parametrize("command, start", [("apply", PRISTINE), ("revert", PATCHED), ("recover", PATCHED)])
def test_read_only_target_gives_a_one_line_refusal(labs, kind, command, start):
    lab = labs[kind]
    run = lab.fresh(start)
    read_only(run.target)
    args = [command, "--sglang", run.target] + (["--patches", run.patches] if command == "apply" else [])
    try:
        result = without_override(lab, *args)
    finally:
        writable(run.target)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    if command == "recover":  # nothing to do: it reads, says so, writes nothing
        assert result.returncode == 0 and "nothing to recover" in result.stdout, result
    else:
        assert_refused(result, "Permission denied", "nothing was changed")
    assert_state(lab, run, start)


@pytest.mark.parametrize("kind", ["checkout", "package"])
@pytest.mark.parametrize("command, start", [("apply", PRISTINE), ("revert", PATCHED), ("recover", PATCHED)])
def test_a_target_on_a_read_only_file_system_gives_a_one_line_refusal(labs, kind, command, start):
    """Issue 36: on a read-only mount the apply of a checkout said "cannot access .../sglpatch-reserve
    (Read-only file system); `sglpatch recover` says where the target stands": nothing had changed, and
    recover had nothing to do. Now it says so."""
    lab = labs[kind]
    run = lab.fresh(start)
    args = [command, "--sglang", run.target] + (["--patches", run.patches] if command == "apply" else [])
    result = on_read_only_mount(lab, run.target, *args)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    if command == "recover":
        assert result.returncode == 0 and "nothing to recover" in result.stdout, result
    else:
        assert_refused(result, "Read-only file system", "nothing was changed")
        assert "recover" not in result.stderr, result.stderr
    assert_state(lab, run, start)


# -- item 5: the parent folder of a package ---------------------------------------------


@pytest.mark.parametrize("command", ["apply", "status"])
def test_parent_folder_of_a_package_names_the_folder_it_resolved(labs, command):
    lab = labs["package"]
    run = lab.fresh(PRISTINE)
    parent = run.target.parent
    args = [command, "--sglang", str(parent)] + (["--patches", str(run.patches)] if command == "apply" else [])
    result = lab.sglpatch(*args)
    assert result.returncode == 0, result.stderr
    assert f"using the package folder {run.target} (found inside {parent})" in result.stdout, result.stdout
