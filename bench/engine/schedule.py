"""Fairness between the engines of a run: the cores each engine gets, and the order they start and run in.

A slower set of cores (a VM's vCPUs are not alike) or a place in the order must weigh on every engine
alike, so both go round the engines.
"""

from __future__ import annotations

import itertools
from pathlib import Path


def physical_cores(cpus: list[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> dict[int, tuple]:
    """Logical CPU -> (package, core) from sysfs; empty where the topology cannot be read."""
    out = {}
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            out[cpu] = (
                int((topology / "physical_package_id").read_text()),
                int((topology / "core_id").read_text()),
            )
        except (OSError, ValueError):
            return {}
    return out


def cpu_groups(cpus: list[int], engines: int, core_of: dict[int, tuple] | None = None) -> list[list[int]] | None:
    """Disjoint, equal sets of cores, one per engine, the last core left to the driver; None where
    there are too few cores for two each. With ``core_of`` (logical CPU -> physical core) whole
    physical cores are dealt out, so that no two engines share one through its SMT siblings."""
    by_core: dict[tuple, list[int]] = {}
    for cpu in sorted(cpus):
        by_core.setdefault((core_of or {}).get(cpu, (cpu,)), []).append(cpu)
    return _deal(sorted(by_core.values()), engines) or _deal([[cpu] for cpu in sorted(cpus)], engines)


def _deal(units: list[list[int]], engines: int) -> list[list[int]] | None:
    """``units`` (cores, each its CPUs) in equal runs, one per engine, the last unit left over."""
    per_engine = (len(units) - 1) // engines
    if per_engine < 1 or sum(map(len, units[:per_engine])) < 2:
        return None
    return [
        sorted(cpu for unit in units[i * per_engine : (i + 1) * per_engine] for cpu in unit) for i in range(engines)
    ]


def cores_for_rep(labels: tuple, groups: list[list[int]], rep: int) -> dict[str, list[int]]:
    """The core groups go round the engines rep by rep: a slower set of cores (a VM's vCPUs are not
    alike) weighs on every engine alike, not on whichever engine it was dealt at start."""
    return {label: groups[(k + rep) % len(groups)] for k, label in enumerate(labels)}


def start_order(labels: tuple, block: int) -> list[str]:
    """Which engine starts first moves round with each block (a next_n, or an engine restart)."""
    k = block % len(labels)
    return list(labels[k:] + labels[:k])


def run_order(labels: tuple, reps: int) -> list[str]:
    """Timed runs per case: with two engines ABBA...; with three, every permutation in turn, so each
    engine takes each place in the order equally often over six repeats."""
    if len(labels) == 2:
        a, b = labels
        return [x for rep in range(reps) for x in ((a, b) if rep % 2 == 0 else (b, a))]
    orders = list(itertools.permutations(labels))
    return [x for rep in range(reps) for x in orders[rep % len(orders)]]
