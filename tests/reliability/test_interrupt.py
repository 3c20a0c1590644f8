"""Interrupt apply, revert and rebase at every write point (SIGINT, SIGTERM, SIGKILL, and a full disk).

apply and revert on a checkout and on a package folder; rebase on a checkout
(a package folder has no history to rebase). The promise: whatever happens, the
target (and the series folder a rebase rewrites) ends fully patched or exactly
as it was, and the tool says which. A full disk here is injected (the write
after the point fails with ENOSPC); test_enospc.py fills a real one. See
testing/fault_harness.py for what each run checks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testing.fault_harness import (
    DISK_FULL,
    FULL_GRID,
    GRID,
    GRID_PROPERTY,
    GRID_SIGNALS,
    KINDS,
    OPERATIONS,
    default_sigint,
    make_labs,
    run_git_grid,
    run_grid,
    run_state,
)

# Rebase legs go onto v0.5.15: its wheel comes from PyPI on a machine that has not cached it.
NETWORK = pytest.mark.network


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return make_labs(tmp_path_factory, base_repo, series_dir, "lab")


@pytest.mark.fault_grid
@pytest.mark.parametrize("sig", [*GRID_SIGNALS, DISK_FULL])
@pytest.mark.parametrize("operation,kind", [pytest.param(*g, marks=NETWORK) if g[0] == "rebase" else g for g in GRID])
def test_interrupted_run_ends_in_a_known_state(labs, record_property, operation, kind, sig):
    lab = labs[kind]
    result = run_grid(lab, OPERATIONS[operation], sig, FULL_GRID)
    _record_figures(record_property, operation, kind, sig, len(lab.trace(OPERATIONS[operation])), result)
    assert result.tried >= 1
    assert not result.failures, "\n".join(result.failures)
    assert result.recovered == result.tried


def _record_figures(record_property, operation: str, kind: str, sig: str, points: int, result) -> None:
    figures = {"operation": operation, "target": kind, "signal": sig, "points": points, "tried": result.tried}
    figures.update(recovered=result.recovered, mid_way=result.mid_way, full=FULL_GRID)
    record_property(GRID_PROPERTY, json.dumps(figures))


# Kills inside git, on checkouts. A rebase's `git checkout --detach` writes some 800 files through the cut's
# filter, so its leg (a minute and more) runs in `make test-fault` only.
GIT_GRID = [g for g in GRID if g[1] == "checkout" and (FULL_GRID or g[0] != "rebase")]


@pytest.mark.fault_grid
@pytest.mark.parametrize(
    "operation,kind", [pytest.param(*g, marks=NETWORK) if g[0] == "rebase" else g for g in GIT_GRID]
)
def test_killed_inside_git_ends_in_a_known_state(labs, record_property, operation, kind):
    """SIGKILL of the run's whole process group while git itself writes the target: mid `git checkout` (a file
    removed, its new bytes not written, the index locked), with a ref locked in `git fetch`, `git branch -D`,
    `git cherry-pick` (testing/git_cut.py). recover must clear the locks the killed run left and end byte for
    byte as it was or fully patched."""
    lab = labs[kind]
    result = run_git_grid(lab, OPERATIONS[operation], FULL_GRID)
    trace = lab.git_trace(OPERATIONS[operation])
    _record_figures(record_property, operation, kind, "KILL in git", len(trace), result)
    assert len(trace) >= 3 and result.tried >= 1, trace  # git's own writes are seen, and cut
    assert not result.failures, "\n".join(result.failures)
    assert result.recovered == result.tried


@NETWORK
@pytest.mark.parametrize("kind", KINDS)
def test_every_operation_writes_through_fault_points(labs, kind):
    """The grid is only as good as its points: each operation passes several, and they are labelled."""
    for operation in (op for op in OPERATIONS.values() if kind in op.kinds):
        labels = labs[kind].trace(operation)
        assert len(labels) >= 3, (operation.name, labels)
        assert all("\t" in line and line.split("\t", 1)[1] for line in labels)


@pytest.mark.parametrize("sig", ["INT", "TERM"])
@pytest.mark.parametrize(
    "operation,kind", [("apply", "checkout"), ("apply", "package"), pytest.param("rebase", "checkout", marks=NETWORK)]
)
def test_signal_from_outside_mid_write_lets_the_step_finish(labs, operation, kind, sig):
    """A real Ctrl-C / kill -TERM from another process, arriving half-way through the run's writes
    (for rebase: while it installs its result, which it then finishes)."""
    lab, op = labs[kind], OPERATIONS[operation]
    middle = max(1, len(lab.trace(op)) // 2)
    tree = lab.fresh(op.start)
    run = subprocess.Popen(
        [sys.executable, "-m", "sglpatch", *op.argv(tree)],
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
    said = [line for line in err.strip().splitlines() if not line.startswith("... ")]
    assert len(said) == 1 and f"interrupted by SIG{sig}" in said[0] and "fully patched" in said[0], err
    assert lab.which_state(tree) == op.end


@pytest.mark.parametrize("operation", ["apply", "revert"])
@pytest.mark.parametrize("kind", KINDS)
def test_revert_after_a_kill_leaves_the_tree_as_it_was(labs, kind, operation):
    """`recover` is not the only way back: after a killed apply or revert, `revert` ends as it was."""
    lab = labs[kind]
    op = OPERATIONS[operation]
    middle = max(1, len(lab.trace(op)) // 2)
    tree = lab.fresh(op.start)
    killed = lab.sglpatch(*op.argv(tree), SGLPATCH_FAULT_AT=str(middle), SGLPATCH_FAULT_SIGNAL="KILL")
    assert killed.returncode == -signal.SIGKILL
    reverted = lab.sglpatch("revert", "--sglang", str(tree.target))
    assert reverted.returncode == 0, reverted.stderr
    assert lab.which_state(tree) == "pristine", reverted.stdout


@pytest.mark.parametrize("point_label", ["checkout: branch fetched", "checkout: switched to the branch"])
def test_recover_refuses_to_call_a_mixed_checkout_as_it_was(labs, point_label):
    """A kill inside `git checkout` itself (not a point the hook reaches) can leave series files half-switched:
    recover must say so and change nothing, not report the tree as it was."""
    lab = labs["checkout"]
    apply = OPERATIONS["apply"]
    labels = [line.split("\t", 1)[1] for line in lab.trace(apply)]
    tree = lab.fresh(apply.start)
    target = tree.target
    killed = lab.sglpatch(
        *apply.argv(tree),
        SGLPATCH_FAULT_AT=str(labels.index(point_label) + 1),
        SGLPATCH_FAULT_SIGNAL="KILL",
    )
    assert killed.returncode == -signal.SIGKILL
    record = json.loads((target / ".git" / "sglpatch-state.json").read_text())
    half_switched = target / record["touched"][0]
    half_switched.write_bytes(half_switched.read_bytes() + b"# half-written by a killed checkout\n")
    before = run_state(tree)
    result = lab.sglpatch("recover", "--sglang", str(target))
    assert result.returncode == 2 and "left changes in" in result.stderr and record["touched"][0] in result.stderr
    assert run_state(tree) == before
    # the advice, followed as printed, keeps the edit it puts back (it was `git checkout -- <files>` alone)
    edit = half_switched.read_bytes()
    keep, put_back = re.findall(r"`([^`]+)`", result.stderr)[:2]
    subprocess.run(["bash", "-c", f"{keep} && {put_back}"], check=True)
    assert Path(f"{half_switched}.mine").read_bytes() == edit and half_switched.read_bytes() != edit


@NETWORK
def test_recover_does_not_roll_a_rebase_back_over_changes_it_cannot_explain(labs):
    """A rebase leaves the work tree clean between its steps; after a kill, an edited file (or a git checkout
    killed half-way) must make recover refuse and keep it, not discard it with the rollback."""
    lab = labs["checkout"]
    rebase = OPERATIONS["rebase"]
    labels = [line.split("\t", 1)[1] for line in lab.trace(rebase)]
    picked = next(i for i, label in enumerate(labels, 1) if label.endswith("recorded"))
    tree = lab.fresh(rebase.start)
    killed = lab.sglpatch(*rebase.argv(tree), SGLPATCH_FAULT_AT=str(picked), SGLPATCH_FAULT_SIGNAL="KILL")
    assert killed.returncode == -signal.SIGKILL
    edited = tree.target / "python" / "sglang" / "version.py"
    edited.write_text(edited.read_text() + "# an edit made after the kill\n")
    before = run_state(tree)
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 2 and "left changes in python/sglang/version.py" in result.stderr, result.stderr
    assert run_state(tree) == before
    subprocess.run(["git", "checkout", "--", "python/sglang/version.py"], cwd=tree.target, check=True)
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 0 and "as it was" in result.stdout, result.stderr
    assert lab.which_state(tree) == rebase.start


def _killed_after_staging(lab):
    rebase = OPERATIONS["rebase"]
    labels = [line.split("\t", 1)[1] for line in lab.trace(rebase)]
    tree = lab.fresh(rebase.start)
    point = labels.index("rebase: result staged") + 1
    killed = lab.sglpatch(*rebase.argv(tree), SGLPATCH_FAULT_AT=str(point), SGLPATCH_FAULT_SIGNAL="KILL")
    assert killed.returncode == -signal.SIGKILL
    state = json.loads((tree.target / ".git" / "sglpatch-rebase" / "state.json").read_text())
    return tree, state["install"]["record"]


@NETWORK
def test_recover_does_not_finish_a_rebase_onto_a_head_someone_moved(labs):
    lab = labs["checkout"]
    tree, record = _killed_after_staging(lab)
    git = ["git", "-C", str(tree.target)]
    subprocess.run([*git, "checkout", "-q", record["previous"]], check=True)
    before = run_state(tree)
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 2 and "moved since the rebase was interrupted" in result.stderr, result.stderr
    assert run_state(tree) == before
    subprocess.run([*git, "checkout", "-q", "--detach", record["head"]], check=True)
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 0 and "fully patched" in result.stdout, result.stderr
    assert lab.which_state(tree) == OPERATIONS["rebase"].end


@NETWORK
def test_recover_does_not_overwrite_a_series_folder_changed_after_the_kill(labs):
    lab = labs["checkout"]
    tree, _ = _killed_after_staging(lab)
    series_file = tree.patches / "series"
    series_file.write_text("".join(line for line in series_file.read_text().splitlines(True) if "0002-" not in line))
    before = run_state(tree)
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 2 and "changed since the rebase began" in result.stderr, result.stderr
    assert run_state(tree) == before


@NETWORK
def test_a_state_folder_whose_deletion_was_cut_short_is_never_read(labs):
    """The state folder is renamed before it is deleted; a kill inside the delete leaves only that name."""
    lab = labs["checkout"]
    tree = lab.fresh(OPERATIONS["rebase"].end)
    leftover = tree.target / ".git" / "sglpatch-rebase.deleting"
    leftover.mkdir()
    (leftover / "state.json").write_text("{half deleted")
    status = lab.sglpatch("status", "--sglang", str(tree.target), "--patches", str(tree.patches))
    assert status.returncode == 0 and "NOTE" not in status.stdout, status.stderr
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 0 and "sglpatch-rebase.deleting" in result.stdout, result.stderr
    assert "fully patched" in result.stdout.strip().splitlines()[-1]
    assert lab.which_state(tree) == OPERATIONS["rebase"].end
