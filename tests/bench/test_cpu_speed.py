"""bench/studies/cpu_speed.py: a unit of work timed on a pinned vCPU, and a speed that moves over seconds
shown in the one-second windows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import cpu_speed  # noqa: E402


def test_a_vcpu_that_slows_down_for_a_second_shows_in_its_windows():
    # 3 s of 1 ms units; the second second runs them at 1.3 ms
    samples, t = [], 0.0
    while t < 3.0:
        wall = 1.3 if 1.0 <= t < 2.0 else 1.0
        samples.append((t, wall, wall * 0.98))
        t += wall / 1000.0
    got = cpu_speed.summary(samples)
    assert got["median_ms"] == pytest.approx(1.0)
    assert got["on_cpu_share"] == pytest.approx(0.98)
    assert got["window_medians"] == pytest.approx([1.0, 1.3, 1.0])


def test_each_vcpu_is_timed_pinned_alone_and_all_at_once(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    out = tmp_path / "speed.json"
    assert cpu_speed.main(["--cpus", ",".join(map(str, cpus)), "--seconds", "0.3", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["mode"] for r in results] == ["one", "all"]
    for result in results:
        assert sorted(int(c) for c in result["per_cpu"]) == cpus
        for s in result["per_cpu"].values():
            assert s["units"] > 10 and 0.0 < s["on_cpu_share"] <= 1.05
