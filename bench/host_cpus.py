"""The guest's vCPUs while a timed run goes on: how much of their time the hypervisor took (steal) and
how busy they were, from the kernel's per-CPU counters in /proc/stat.

Why: on the H200 (a KVM guest with 16 vCPUs) the same Python code of an engine's decode step ran
slower in some timed runs than in others, in every engine alike, and a run's step interval followed
its draft loop's host time; neither the core group nor the order of the runs decided it
(docs/engine-benchmark.md, "Host speed run by run"). Steal time is what a guest sees when the host runs something else on
its vCPUs' cores; this records it beside each run, so a slow run shows it or rules it out. Where
/proc/stat is missing ``summary`` stays None.

    with HostSampler(cpus=[0, 1, 2, 3, 4]) as host:
        timed_work()
    host.summary   # {"cpus", "ticks", "busy_share", "steal_share", "steal_share_by_cpu"}
"""

from __future__ import annotations

from pathlib import Path

# /proc/stat's per-CPU columns after the name, in its order (guest time is inside user already)
COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
BUSY = ("user", "nice", "system", "irq", "softirq")


def read_cpu_ticks(stat_path: str | Path = "/proc/stat") -> dict[int, dict[str, int]] | None:
    """Per vCPU, its tick counters (COLUMNS); None where the file cannot be read."""
    try:
        text = Path(stat_path).read_text()
    except OSError:
        return None
    ticks = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            values = [int(v) for v in rest.split()]
            ticks[int(name[3:])] = dict(zip(COLUMNS, values + [0] * (len(COLUMNS) - len(values)), strict=False))
    return ticks


def summarize(before: dict, after: dict, cpus: list[int] | None) -> dict | None:
    """Shares of the vCPUs' ticks between two readings: busy and stolen, over ``cpus`` (every vCPU where
    None) and stolen per vCPU."""
    chosen = sorted(c for c in (cpus if cpus is not None else after) if c in before and c in after)
    if not chosen:
        return None
    delta = {c: {k: after[c][k] - before[c][k] for k in COLUMNS} for c in chosen}
    total = {c: sum(d.values()) for c, d in delta.items()}
    ticks = sum(total.values())

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    return {
        "cpus": chosen,
        "ticks": ticks,
        "busy_share": share(sum(delta[c][k] for c in chosen for k in BUSY), ticks),
        "steal_share": share(sum(d["steal"] for d in delta.values()), ticks),
        "steal_share_by_cpu": {str(c): share(delta[c]["steal"], total[c]) for c in chosen},
    }


class HostSampler:
    def __init__(self, cpus: list[int] | None = None, stat_path: str | Path = "/proc/stat"):
        self.cpus = cpus
        self.stat_path = stat_path
        self.before = None
        self.summary = None

    def __enter__(self) -> HostSampler:
        self.before = read_cpu_ticks(self.stat_path)
        return self

    def __exit__(self, *exc) -> None:
        after = read_cpu_ticks(self.stat_path)
        if self.before is not None and after is not None:
            self.summary = summarize(self.before, after, self.cpus)
