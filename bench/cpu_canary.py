"""A canary of the host CPU's speed beside the engines' timed runs: a small process, pinned to a vCPU no engine
is pinned to, that times the same unit of Python work every 10 ms (a tenth of that vCPU).

Why: in the v0.5.14 drafts rows a slow run is the CPU running the same Python code slower (the scheduler
thread on a CPU 0.96-0.99 of the time, steal at most 2.8%; docs/engine-benchmark.md, "Host speed run by
run"). Whether the whole box slows then, or only the engine's own vCPUs, is what a canary elsewhere tells:
its unit time follows the engine's draft loop in the first case and stays put in the second.

    with CpuCanary(15) as canary:
        t0 = time.time(); timed_work(); t1 = time.time()
        canary.summary_between(t0, t1)   # {"cpu", "units", "median_ms"}, or None (no vCPU, no sample)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository, for `bench`

from bench.gpu_clocks import stop_with_parent  # noqa: E402

PERIOD_S = 0.01


def unit() -> int:
    """A fixed piece of interpreter work, about a millisecond on the H200 box's and this machine's CPUs."""
    table: dict[int, list[int]] = {}
    total = 0
    for i in range(6000):
        row = table.setdefault(i % 97, [])
        row.append(i * 3 + 1)
        total += len(row) + (i ^ (i >> 3))
    return total


class CpuCanary:
    def __init__(self, cpu: int | None, period_s: float = PERIOD_S):
        self.cpu, self.period_s = cpu, period_s
        self.process = None
        self.samples = Path(tempfile.mkstemp(prefix="cpu-canary-", suffix=".txt")[1]) if cpu is not None else None
        self._read: list[tuple[float, float]] = []  # (time.time(), unit ms), in the order written
        self._offset = 0  # bytes of the samples file read so far: whole lines only

    def __enter__(self) -> CpuCanary:
        if self.cpu is not None:
            command = [sys.executable, __file__, "--cpu", str(self.cpu), "--out", str(self.samples)]
            # stops with the thread that started it, even one killed past its __exit__ (as the clock sampler)
            self.process = subprocess.Popen([*command, "--period-s", str(self.period_s)], preexec_fn=stop_with_parent)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
        if self.samples is not None:
            self.samples.unlink(missing_ok=True)

    def summary_between(self, t0: float, t1: float) -> dict | None:
        """The units timed between two `time.time()` readings: their median wall time in ms."""
        if self.samples is None:
            return None
        self._read_new_lines()
        times = [ms for t, ms in self._read if t0 <= t <= t1]
        return {"cpu": self.cpu, "units": len(times), "median_ms": statistics.median(times)} if times else None

    def _read_new_lines(self) -> None:
        """The lines written since the last call (the driver asks after every run: a floor call makes hundreds),
        up to the last newline, so that a line the canary is still writing waits for the next call."""
        with open(self.samples, "rb") as f:
            f.seek(self._offset)
            new = f.read()
        whole = new[: new.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.decode().splitlines():
            t, ms = line.split()
            self._read.append((float(t), float(ms)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--period-s", type=float, default=PERIOD_S)
    args = ap.parse_args(argv)
    os.sched_setaffinity(0, {args.cpu})
    with open(args.out, "a", buffering=1) as out:
        while True:
            started, t = time.perf_counter(), time.time()
            unit()
            took = time.perf_counter() - started
            out.write(f"{t:.4f} {took * 1000.0:.4f}\n")
            time.sleep(max(0.0, args.period_s - took))


if __name__ == "__main__":
    sys.exit(main())
