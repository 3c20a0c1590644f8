"""A full disk during apply, revert and rebase (issue 24): the target ends as it was or fully patched, and says which.

Two ways to fill the disk, each run through the CLI on real v0.5.14 trees and
checked byte for byte (`fault_harness.after_disk_full`):

* injected: the N-th write point raises the OSError a full disk gives
  (SGLPATCH_FAULT_SIGNAL=ENOSPC), at every point, where a real disk could not
  be made to run out (a rename, a removal);
* real: a small tmpfs, filled so that the run runs out of space between two of
  its write points (inside git's own writes too: a `git checkout`, `git fetch`,
  the index). Mounting needs root with CAP_SYS_ADMIN; elsewhere these skip,
  saying so, and the injected grid still runs.

After each run the space is freed and `recover` must end in a known state.
`make test` runs a sample (first, middle and last point or level); `make
test-fault` (SGLPATCH_FAULT_GRID=full) every one.
"""

from __future__ import annotations

import json
import shutil

import pytest

from testing.fault_harness import (
    DISK_FULL,
    FULL_GRID,
    GRID,
    GRID_PROPERTY,
    KINDS,
    OPERATIONS,
    PATCHED,
    PRISTINE,
    Lab,
    run_full_disk_grid,
    run_grid,
    run_state,
)
from testing.full_disk import mount_small_disk

NETWORK = pytest.mark.network  # rebase goes onto v0.5.15, from PyPI on a machine that has not cached it
CASES = [pytest.param(*g, marks=NETWORK) if g[0] == "rebase" else g for g in GRID]


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return {kind: Lab(kind, tmp_path_factory.mktemp(f"enospc-{kind}"), base_repo, series_dir) for kind in KINDS}


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    disk = mount_small_disk(tmp_path_factory.mktemp("small-disk"))
    if isinstance(disk, str):
        pytest.skip(disk)
    yield disk
    disk.unmount()


def _record(record_property, lab, operation, kind, how, points, result):
    figures = {
        "operation": operation,
        "target": kind,
        "signal": f"ENOSPC ({how})",
        "points": points,
        "tried": result.tried,
        "recovered": result.recovered,
        "mid_way": result.mid_way,
        "full": FULL_GRID,
    }
    record_property(GRID_PROPERTY, json.dumps(figures))


@pytest.mark.parametrize("operation,kind", CASES)
def test_a_full_disk_at_a_write_point_ends_in_a_known_state(labs, record_property, operation, kind):
    lab = labs[kind]
    result = run_grid(lab, OPERATIONS[operation], DISK_FULL, FULL_GRID)
    _record(record_property, lab, operation, kind, "injected", len(lab.trace(OPERATIONS[operation])), result)
    assert result.tried >= 1
    assert not result.failures, "\n".join(result.failures)


@pytest.mark.parametrize("operation,kind", CASES)
def test_a_real_full_disk_ends_in_a_known_state(labs, small_disk, record_property, operation, kind):
    lab = labs[kind]
    result = run_full_disk_grid(lab, OPERATIONS[operation], small_disk, FULL_GRID)
    points = len(lab.space_trace(OPERATIONS[operation], small_disk)) - 1
    _record(record_property, lab, operation, kind, "tmpfs", points, result)
    assert result.tried >= 1
    assert not result.failures, "\n".join(result.failures)


@pytest.mark.parametrize("kind", KINDS)
def test_apply_on_a_disk_that_runs_out_anywhere_leaves_no_half_applied_tree(labs, small_disk, kind):
    """Defects 2 and 3 of issue 24, without the tool's own trace: free space from none to what a
    successful apply took, in even steps; each run ends as it was or fully patched and says so."""
    lab, apply = labs[kind], OPERATIONS["apply"]
    run = lab.fresh(PRISTINE, where=small_disk.root)
    small_disk.free()
    before = small_disk.available()
    assert lab.sglpatch(*apply.argv(run)).returncode == 0 and run_state(run) == lab.reference(PATCHED)
    taken = before - small_disk.available()
    shutil.rmtree(run.root)
    steps = 24 if FULL_GRID else 8
    failures = []
    for step in range(steps):
        leave = taken * 3 * step // steps  # up to 3 times what it took: its scratch and the roll-back's need more
        problem = lab.run_out_of_space(apply, small_disk, leave)
        if problem:
            failures.append(f"{leave // 1024} KiB free: {problem}")
    assert not failures, "\n".join(failures)
