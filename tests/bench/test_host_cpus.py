"""bench/host_cpus.py: the vCPUs' busy and stolen shares between two readings of /proc/stat."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.host_cpus import HostSampler, read_cpu_ticks, summarize  # noqa: E402

HEAD = "cpu  900 0 300 5000 10 0 5 40 0 0\n"
TAIL = "intr 12345 0 0\nctxt 999\nbtime 1700000000\n"


def _stat(path: Path, cpus: dict[int, tuple]) -> Path:
    lines = "".join(f"cpu{c} " + " ".join(map(str, v)) + " 0 0\n" for c, v in cpus.items())
    path.write_text(HEAD + lines + TAIL)
    return path


def test_shares_over_the_chosen_vcpus_and_steal_per_vcpu(tmp_path):
    #              user nice system idle iowait irq softirq steal
    before = {0: (100, 0, 20, 800, 0, 0, 0, 0), 1: (50, 0, 10, 900, 0, 0, 0, 10), 2: (0, 0, 0, 1000, 0, 0, 0, 0)}
    after = {0: (160, 0, 30, 820, 0, 0, 0, 10), 1: (80, 0, 10, 930, 0, 0, 0, 50), 2: (0, 0, 0, 1100, 0, 0, 0, 0)}
    a = read_cpu_ticks(_stat(tmp_path / "a", before))
    b = read_cpu_ticks(_stat(tmp_path / "b", after))
    assert sorted(a) == [0, 1, 2]  # the aggregate "cpu" line is not a vCPU
    got = summarize(a, b, [0, 1])
    # vCPU 0: 100 ticks, 70 busy, 10 stolen; vCPU 1: 100 ticks, 30 busy, 40 stolen
    assert got["cpus"] == [0, 1] and got["ticks"] == 200
    assert got["busy_share"] == pytest.approx(0.5) and got["steal_share"] == pytest.approx(0.25)
    assert got["steal_share_by_cpu"] == {"0": pytest.approx(0.1), "1": pytest.approx(0.4)}
    assert summarize(a, b, None)["cpus"] == [0, 1, 2]
    assert summarize(a, b, [7]) is None  # no such vCPU


def test_a_short_window_has_no_shares_rather_than_a_division_by_zero(tmp_path):
    same = read_cpu_ticks(_stat(tmp_path / "s", {0: (1, 0, 0, 1, 0, 0, 0, 0)}))
    assert summarize(same, same, [0]) == {
        "cpus": [0],
        "ticks": 0,
        "busy_share": None,
        "steal_share": None,
        "steal_share_by_cpu": {"0": None},
    }


def test_the_sampler_reads_this_machine_and_stays_quiet_without_proc(tmp_path):
    with HostSampler() as host:
        sum(range(200_000))
    assert host.summary is None or host.summary["ticks"] >= 0
    with HostSampler(stat_path=tmp_path / "missing") as none:
        pass
    assert none.summary is None
