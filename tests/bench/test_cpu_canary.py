"""bench/cpu_canary.py: a pinned process timing the same unit of work beside a timed run, read by time."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cpu_canary import CpuCanary  # noqa: E402


def test_the_canary_times_units_on_its_vcpu_within_a_run_and_leaves_nothing_behind():
    cpu = min(os.sched_getaffinity(0))
    with CpuCanary(cpu) as canary:
        time.sleep(0.5)  # the canary's interpreter starting
        t0 = time.time()
        time.sleep(0.4)
        t1 = time.time()
        got = canary.summary_between(t0, t1)
        assert canary.summary_between(t1 + 60, t1 + 61) is None  # no sample in that window
        samples = canary.samples
    assert got["cpu"] == cpu and got["units"] >= 5 and got["median_ms"] > 0
    assert canary.process.poll() is not None and not samples.exists()


def test_no_spare_vcpu_no_canary():
    with CpuCanary(None) as canary:
        assert canary.process is None and canary.summary_between(0, time.time()) is None


def test_each_sample_is_read_once_and_a_line_still_being_written_waits():
    canary = CpuCanary(0)  # not entered: the test writes the samples the canary's process would
    try:
        canary.samples.write_text("10.0 1.0\n11.0 3.0\n12.0 2")  # the last line half written
        assert canary.summary_between(9, 13) == {"cpu": 0, "units": 2, "median_ms": 2.0}
        with open(canary.samples, "a") as f:
            f.write(".5\n13.0 4.0\n")
        assert canary.summary_between(11.5, 13) == {"cpu": 0, "units": 2, "median_ms": 3.25}
        assert canary.summary_between(9, 13)["units"] == 4
    finally:
        canary.samples.unlink()
