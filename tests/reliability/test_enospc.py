"""A full disk during apply, revert and rebase (issue 24): the target ends as it was or fully patched, and says which.

Two ways to fill the disk, each run through the CLI on real v0.5.14 trees and
checked byte for byte (`fault_harness.after_disk_full`):

* injected (in test_interrupt.py's grid, beside the signals): the N-th write
  point raises the OSError a full disk gives (SGLPATCH_FAULT_SIGNAL=ENOSPC), at
  every point, where a real disk could not be made to run out (a rename, a
  removal);
* real (here): a small tmpfs, filled so that the run runs out of space between two of
  its write points (inside git's own writes too: a `git checkout`, `git fetch`,
  the index). Mounting needs root with CAP_SYS_ADMIN; elsewhere these skip,
  saying so, and the injected grid still runs.

After each run the space is freed and `recover` must end in a known state.
The grid test (marker `fault_grid`) is `make test-fault`'s (SGLPATCH_FAULT_GRID=full):
every level, rebase too; a plain pytest run of it takes one level per apply and
revert. `make test` runs the defect cases (two sizes each).
"""

from __future__ import annotations

import json

import pytest

from sglpatch.lines import default_patch_dir
from sglpatch.series import load_series
from testing.fault_harness import (
    FULL_GRID,
    GRID,
    GRID_PROPERTY,
    KINDS,
    OPERATIONS,
    PRISTINE,
    Lab,
    make_labs,
    run_full_disk_grid,
)
from testing.full_disk import mount_small_disk

NETWORK = pytest.mark.network  # rebase goes onto v0.5.15, from PyPI on a machine that has not cached it
# A real full disk under rebase (its trees are the largest) runs in the full grid only.
CASES = [pytest.param(*g, marks=NETWORK) if g[0] == "rebase" else g for g in GRID if FULL_GRID or g[0] != "rebase"]


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return make_labs(tmp_path_factory, base_repo, series_dir, "enospc")


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


@pytest.mark.fault_grid
@pytest.mark.parametrize("operation,kind", CASES)
def test_a_real_full_disk_ends_in_a_known_state(labs, small_disk, record_property, operation, kind):
    lab = labs[kind]
    result = run_full_disk_grid(lab, OPERATIONS[operation], small_disk, FULL_GRID)
    points = len(lab.space_trace(OPERATIONS[operation], small_disk)) - 1
    _record(record_property, lab, operation, kind, "tmpfs", points, result)
    assert result.tried >= 1
    assert not result.failures, "\n".join(result.failures)


@pytest.fixture(scope="module")
def series_labs(tmp_path_factory, base_repo):
    """Labs with the project's own v0.5.14 series (9 files), as the hostile trial ran it."""
    return {
        kind: Lab(kind, tmp_path_factory.mktemp(f"series-{kind}"), base_repo, default_patch_dir()) for kind in KINDS
    }


@pytest.mark.parametrize("kind", KINDS)
def test_apply_on_a_disk_that_runs_out_part_way_ends_in_a_named_state(series_labs, small_disk, kind):
    """Defects 2 and 3 of issue 24, without the tool's own trace: the project's series on a disk with room
    for part of the apply (sizes the tree sets: a checkout's index, which `git checkout` rewrites after the
    files; a package's files the series touches). Before: a checkout said "rolled back, nothing changed"
    over changed files; a package was left half-applied ("and so did the roll-back"). Now each ends as it
    was or fully patched and says which, and `recover` on the still full disk never says otherwise."""
    lab, apply = series_labs[kind], OPERATIONS["apply"]
    template = lab.template(PRISTINE).target
    if kind == "checkout":
        size = (template / ".git" / "index").stat().st_size
    else:
        touched = [template / p.removeprefix("python/sglang/") for p in load_series(default_patch_dir()).touched_paths]
        size = sum(path.stat().st_size for path in touched if path.exists())
    fractions = (1.05, 1.15, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0) if FULL_GRID else (1.15, 1.5)
    failures = []
    for fraction in fractions:
        leave = int(size * fraction)
        problem = lab.run_out_of_space(apply, small_disk, leave, named=True)
        if problem:
            failures.append(f"{leave // 1024} KiB free: {problem}")
    assert not failures, "\n".join(failures)
