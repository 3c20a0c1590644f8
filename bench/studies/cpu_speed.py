"""How fast the box's vCPUs run the same Python work, second by second, with no engine running (issue 47,
Required 6).

The v0.5.14 floors' spread follows the host's speed run by run, and the engine's records say the scheduler
thread was on a CPU for 0.96-0.99 of its steps' host time with steal at most 2.8% (over the engine's vCPUs;
docs/results/engine_h200_drafts_n2_host_speed.txt): the same work took more CPU time in a slow run. This asks
whether the box does that by itself. One process per vCPU, pinned to it, repeats a fixed unit of interpreter
work (dict, list and arithmetic, about what a scheduler step does on the host) for ``--seconds``, and records
each unit's wall and thread CPU time; /proc/stat's steal of each vCPU is read before and after. ``--mode one``
runs the vCPUs one after the other (a vCPU alone on the box), ``all`` at once (every vCPU busy, as the
engine's pinned groups and their helper threads make some of them), ``both`` does one then all.

    python bench/studies/cpu_speed.py --seconds 4 --mode both --json cpu_speed.json

Printed per vCPU: the unit's median, its 10th and 90th percentiles over the whole time, and the slowest and
fastest one-second window's median relative to the vCPU's overall median (a box whose speed moves over
seconds shows a wide window range); then the same over all vCPUs. No GPU is needed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for `bench`

from bench.cpu_canary import unit  # noqa: E402
from bench.host_cpus import read_cpu_ticks, summarize  # noqa: E402


def time_units(cpu: int, seconds: float) -> list[tuple[float, float, float]]:
    """On `cpu`: (start, wall ms, thread CPU ms) of each unit for `seconds`."""
    os.sched_setaffinity(0, {cpu})
    for _ in range(20):  # warm the interpreter's caches on this vCPU
        unit()
    out = []
    end = time.perf_counter() + seconds
    while (start := time.perf_counter()) < end:
        cpu0 = time.thread_time()
        unit()
        out.append((start, (time.perf_counter() - start) * 1000.0, (time.thread_time() - cpu0) * 1000.0))
    return out


def _work(args: tuple[int, float]) -> tuple[int, dict]:
    """One vCPU's units, summarised, with the share of its ticks the hypervisor took meanwhile."""
    cpu, seconds = args
    before = read_cpu_ticks()
    samples = time_units(cpu, seconds)
    after = read_cpu_ticks()
    steal = summarize(before, after, [cpu]) if before and after else None
    return cpu, {**summary(samples), "steal_share": steal["steal_share"] if steal else None}


def summary(samples: list[tuple[float, float, float]]) -> dict:
    """The unit's wall time (median, p10, p90 in ms), its on-CPU share, and the one-second windows' medians
    relative to the overall median."""
    walls = [w for _, w, _ in samples]
    median = statistics.median(walls)
    t0 = samples[0][0]
    windows: dict[int, list[float]] = {}
    for start, wall, _ in samples:
        windows.setdefault(int(start - t0), []).append(wall)
    window_medians = [statistics.median(v) / median for k, v in sorted(windows.items()) if len(v) >= 5]
    deciles = statistics.quantiles(walls, n=10)
    return {
        "units": len(walls),
        "median_ms": median,
        "p10_ms": deciles[0],
        "p90_ms": deciles[-1],
        "on_cpu_share": sum(c for _, _, c in samples) / sum(walls),
        "window_medians": window_medians,
    }


def measure(cpus: list[int], seconds: float, together: bool) -> dict:
    jobs = [(cpu, seconds) for cpu in cpus]
    if together:
        with multiprocessing.get_context("fork").Pool(len(cpus)) as pool:
            per_cpu = dict(pool.map(_work, jobs))
    else:
        per_cpu = dict(_work(job) for job in jobs)
    medians = [s["median_ms"] for s in per_cpu.values()]
    windows = [w for s in per_cpu.values() for w in s["window_medians"]]
    return {
        "mode": "all" if together else "one",
        "seconds_per_cpu": seconds,
        "per_cpu": per_cpu,
        "cpu_medians_relative": [m / statistics.median(medians) for m in medians],
        "window_range": [min(windows), max(windows)] if windows else None,
    }


def print_result(result: dict) -> None:
    print(f"mode {result['mode']}: each vCPU {result['seconds_per_cpu']} s of the same unit of Python work")
    for cpu, s in result["per_cpu"].items():
        w = s["window_medians"]
        print(
            f"  vCPU {cpu:2d}: {s['units']:5d} units, median {s['median_ms']:.3f} ms (p10 {s['p10_ms']:.3f}, "
            f"p90 {s['p90_ms']:.3f}), on a CPU {s['on_cpu_share']:.2f}, steal {s['steal_share'] or 0:.3f}"
            + (f", 1-s windows {min(w):.2f}-{max(w):.2f}x" if w else "")
        )
    rel = result["cpu_medians_relative"]
    print(f"  vCPUs' medians {min(rel):.2f}-{max(rel):.2f}x of their median; 1-s windows {result['window_range']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpus", help="vCPUs to measure, comma-separated (default: every one this process may use)")
    ap.add_argument("--seconds", type=float, default=4.0, help="per vCPU")
    ap.add_argument("--mode", choices=("one", "all", "both"), default="both")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    cpus = [int(c) for c in args.cpus.split(",")] if args.cpus else sorted(os.sched_getaffinity(0))
    modes = {"one": [False], "all": [True], "both": [False, True]}[args.mode]
    results = [measure(cpus, args.seconds, together) for together in modes]
    for result in results:
        print_result(result)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
