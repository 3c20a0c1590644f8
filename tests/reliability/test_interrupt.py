"""Interrupt apply and revert at every write point (SIGINT, SIGTERM, SIGKILL), on a checkout and a package folder.

The promise: whatever happens, the target ends fully patched or exactly as it
was, and the tool says which. See fault_harness.py for what each run checks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import FULL_GRID, GRID_PROPERTY
from fault_harness import KINDS, OPERATIONS, PATCHED, SIGNALS, Lab, default_sigint, run_grid, tree_state


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return {kind: Lab(kind, tmp_path_factory.mktemp(f"lab-{kind}"), base_repo, series_dir) for kind in KINDS}


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_interrupted_run_ends_in_a_known_state(labs, record_property, operation, kind, sig):
    lab = labs[kind]
    result = run_grid(lab, OPERATIONS[operation], sig, FULL_GRID)
    figures = {
        "operation": operation,
        "target": kind,
        "signal": sig,
        "points": len(lab.trace(OPERATIONS[operation])),
        "tried": result.tried,
        "recovered": result.recovered,
        "mid_way": result.mid_way,
        "full": FULL_GRID,
    }
    record_property(GRID_PROPERTY, json.dumps(figures))
    assert result.tried >= 1
    assert not result.failures, "\n".join(result.failures)
    assert result.recovered == result.tried


@pytest.mark.parametrize("kind", KINDS)
def test_every_operation_writes_through_fault_points(labs, kind):
    """The grid is only as good as its points: each operation passes several, and they are labelled."""
    for operation in OPERATIONS.values():
        labels = labs[kind].trace(operation)
        assert len(labels) >= 3, (operation.name, labels)
        assert all("\t" in line and line.split("\t", 1)[1] for line in labels)


@pytest.mark.parametrize("sig", ["INT", "TERM"])
@pytest.mark.parametrize("kind", KINDS)
def test_signal_from_outside_mid_write_lets_the_step_finish(labs, kind, sig):
    """A real Ctrl-C / kill -TERM from another process, arriving while apply is half-way through its writes."""
    lab = labs[kind]
    apply = OPERATIONS["apply"]
    middle = max(1, len(lab.trace(apply)) // 2)
    target = lab.fresh(apply.start)
    run = subprocess.Popen(
        [sys.executable, "-m", "sglpatch", *apply.argv(target, lab.patches)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
        env=lab.env(SGLPATCH_FAULT_AT=str(middle), SGLPATCH_FAULT_SIGNAL="STOP"),
    )
    _, status = os.waitpid(run.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    os.kill(run.pid, signal.Signals[f"SIG{sig}"])
    os.kill(run.pid, signal.SIGCONT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.Signals[f"SIG{sig}"], err
    assert err.strip().splitlines() == [err.strip()] and f"interrupted by SIG{sig}" in err and "fully patched" in err
    assert lab.which_state(target) == PATCHED


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("kind", KINDS)
def test_revert_after_a_kill_leaves_the_tree_as_it_was(labs, kind, operation):
    """`recover` is not the only way back: after a killed apply or revert, `revert` ends as it was."""
    lab = labs[kind]
    op = OPERATIONS[operation]
    middle = max(1, len(lab.trace(op)) // 2)
    target = lab.fresh(op.start)
    killed = lab.sglpatch(*op.argv(target, lab.patches), SGLPATCH_FAULT_AT=str(middle), SGLPATCH_FAULT_SIGNAL="KILL")
    assert killed.returncode == -signal.SIGKILL
    reverted = lab.sglpatch("revert", "--sglang", str(target))
    assert reverted.returncode == 0, reverted.stderr
    assert lab.which_state(target) == "pristine", reverted.stdout


@pytest.mark.parametrize("point_label", ["checkout: branch fetched", "checkout: switched to the branch"])
def test_recover_refuses_to_call_a_mixed_checkout_as_it_was(labs, point_label):
    """A kill inside `git checkout` itself (not a point the hook reaches) can leave series files half-switched:
    recover must say so and change nothing, not report the tree as it was."""
    lab = labs["checkout"]
    apply = OPERATIONS["apply"]
    labels = [line.split("\t", 1)[1] for line in lab.trace(apply)]
    target = lab.fresh(apply.start)
    killed = lab.sglpatch(
        *apply.argv(target, lab.patches),
        SGLPATCH_FAULT_AT=str(labels.index(point_label) + 1),
        SGLPATCH_FAULT_SIGNAL="KILL",
    )
    assert killed.returncode == -signal.SIGKILL
    record = json.loads((target / ".git" / "sglpatch-state.json").read_text())
    half_switched = target / record["touched"][0]
    half_switched.write_bytes(half_switched.read_bytes() + b"# half-written by a killed checkout\n")
    before = tree_state(target)
    result = lab.sglpatch("recover", "--sglang", str(target))
    assert result.returncode == 2 and "left changes in" in result.stderr and record["touched"][0] in result.stderr
    assert tree_state(target) == before
