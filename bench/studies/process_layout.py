"""Does a Python process keep a speed of its own, and does fixing its hash seed and address layout take it
away? (issue 47, Required 6)

In the engine runs a second pristine process, the same code on the same cores going round, kept a host speed
of its own for a whole call: its draft loop's host time averaged 1.113x, 1.013x and 1.074x the first's on the
H100 (docs/engine-benchmark.md, "A floor with its interval"). Two things differ between two processes of one
program and last as long as they do: the seed of Python's str and bytes hashes (PYTHONHASHSEED, random per
process; it sets the order of sets and the probing of dicts keyed by names), and where the kernel puts the
stack, heap and libraries (ASLR). pyperf runs many worker processes for the first reason; Mytkowicz et al.
("Producing wrong data without doing anything obviously wrong", ASPLOS 2009) showed layout alone moving
run times by several percent.

This starts ``--processes`` workers per mode, all pinned to one vCPU, and in each of ``--rounds`` rounds asks
every worker, in a shuffled order, for one block of a fixed piece of interpreter work (names in dicts and
sets, objects, sorting: what a scheduler step does on the host). Modes:

- ``random``: as the engines run today (each process its own hash seed, ASLR on);
- ``hash``: every process PYTHONHASHSEED=0;
- ``layout``: PYTHONHASHSEED=0 and ASLR off for the process (personality ADDR_NO_RANDOMIZE, as ``setarch -R``).

Each block's log time less its round's mean over all workers leaves what is the worker's own; per mode it
prints each worker's speed relative to the mode's mean, the spread of those speeds, how much of the blocks'
variance they hold (the intraclass correlation), and how often shuffling blocks between the mode's workers
within rounds spreads them as widely (a permutation p). No GPU is needed.

    python bench/studies/process_layout.py --processes 8 --rounds 40 --json layout.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for `bench`

from bench.engine.processes import layout_of, prepare_child  # noqa: E402

MODES = ("random", "hash", "layout")


class Request:
    def __init__(self, rid: str, length: int):
        self.rid, self.length, self.output = rid, length, []
        self.sampling = {"temperature": 0.0, "top_p": 1.0, "stop": f"<{rid[-2:]}>"}


def step_work() -> int:
    """About a millisecond of interpreter work keyed by names, whose dict probing and set order follow the
    hash seed."""
    requests = {f"rid-{i:04x}": Request(f"rid-{i:04x}", 100 + (i * 37) % 900) for i in range(160)}
    finished = {rid for rid, req in requests.items() if req.length % 7 == 0}
    total = 0
    for _ in range(6):
        for rid in finished:
            total += len(requests[rid].sampling["stop"])
        running = sorted((r for r in requests.values() if r.rid not in finished), key=lambda r: r.length)
        for req in running:
            req.output.append(req.length & 0xFF)
            total += len(req.output) + len(req.sampling)
        names = {f"{r.rid}:{len(r.output)}" for r in running[::3]}
        total += sum(len(n) for n in names)
    return total


def worker() -> None:
    """Answers each line N on stdin with the milliseconds N units of step_work took."""
    for _ in range(30):
        step_work()
    for line in sys.stdin:
        start = time.perf_counter()
        for _ in range(int(line)):
            step_work()
        print(f"{(time.perf_counter() - start) * 1000.0:.4f}", flush=True)


def start(mode: str, cpu: int) -> tuple[subprocess.Popen, dict]:
    """A worker on `cpu` started as `mode` asks, and what it was given (bench/engine/processes.layout_of)."""
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    if mode in ("hash", "layout"):
        env["PYTHONHASHSEED"] = "0"
    process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
        preexec_fn=lambda: prepare_child([cpu], mode == "layout"),
    )
    return process, layout_of(process.pid, env)


def block(process: subprocess.Popen, units: int) -> float:
    process.stdin.write(f"{units}\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def own_speeds(log_times: list[list[float]], round_means: list[float]) -> list[float]:
    """Each worker's mean log time less the rounds' means: its own speed on the log scale."""
    return [statistics.fmean(t - m for t, m in zip(times, round_means, strict=True)) for times in log_times]


def summarize(log_times: list[list[float]], round_means: list[float], shuffles: int, rng: random.Random) -> dict:
    own = own_speeds(log_times, round_means)
    centre = statistics.fmean(own)
    rel = [math.exp(o - centre) for o in own]
    residual = [[t - m for t, m in zip(times, round_means, strict=True)] for times in log_times]
    rounds = len(round_means)
    within = statistics.fmean(statistics.variance(r) for r in residual)
    between = statistics.variance(own)  # of the means of `rounds` blocks
    own_share = max(0.0, between - within / rounds)  # the variance of the workers' own speeds
    icc = own_share / (own_share + within)
    observed = statistics.pstdev(own)
    as_wide = 0
    columns = list(zip(*residual, strict=True))
    for _ in range(shuffles):
        shuffled = [rng.sample(column, len(column)) for column in columns]
        as_wide += statistics.pstdev([statistics.fmean(row) for row in zip(*shuffled, strict=True)]) >= observed
    return {
        "speeds": rel,
        "spread": max(rel) / min(rel),
        "sd_of_speeds": statistics.stdev(rel),
        "block_cv_within": math.sqrt(within),
        "icc": icc,
        "permutation_p": (as_wide + 1) / (shuffles + 1),
    }


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    started = {mode: [start(mode, args.cpu) for _ in range(args.processes)] for mode in args.modes}
    workers = {mode: [process for process, _ in pairs] for mode, pairs in started.items()}
    everyone = [(mode, i) for mode in args.modes for i in range(args.processes)]
    times = {key: [] for key in everyone}
    try:
        for r in range(args.rounds):
            for mode, i in rng.sample(everyone, len(everyone)):
                times[(mode, i)].append(math.log(block(workers[mode][i], args.units)))
            if (r + 1) % 10 == 0:
                print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
    finally:
        for procs in workers.values():
            for p in procs:
                p.stdin.close()
                p.wait()
    round_means = [statistics.fmean(times[key][r] for key in everyone) for r in range(args.rounds)]
    block_ms = statistics.median(math.exp(t) for key in everyone for t in times[key])
    out = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "cpu": args.cpu, "block_ms": block_ms}
    for mode in args.modes:
        log_times = [times[(mode, i)] for i in range(args.processes)]
        out[mode] = {
            **summarize(log_times, round_means, args.shuffles, rng),
            "aslr": sorted({layout["aslr"] for _, layout in started[mode]}, key=str),
        }
    return out


def report(out: dict, modes: list[str]) -> None:
    print(f"vCPU {out['cpu']}, a block {out['block_ms']:.1f} ms (median)")
    print("mode     spread  sd of speeds  block cv  ICC    p      speeds (each worker / the mode's mean)")
    for mode in modes:
        m = out[mode]
        speeds = " ".join(f"{s:.3f}" for s in sorted(m["speeds"]))
        print(
            f"{mode:8} {m['spread']:.3f}   {m['sd_of_speeds']:.4f}        {m['block_cv_within']:.4f}    "
            f"{m['icc']:.3f}  {m['permutation_p']:.3f}  {speeds}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=8, help="workers per mode")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--units", type=int, default=40, help="units of step_work in a block")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES))
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--shuffles", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.worker:
        worker()
        return 0
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or args.processes < 2 or args.rounds < 2:
        print(f"process_layout: modes are {', '.join(MODES)}; at least 2 processes and 2 rounds", file=sys.stderr)
        return 2
    out = run(args)
    report(out, args.modes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
