"""The GPU's clocks, temperature and power while a timed run goes on, sampled by nvidia-smi in the background.

Why: the same GPU work timed in two processes has differed by far more than memory-bound work does: the step's
GPU time of two pristine engine processes by 0.87-1.33x (v0.5.14 engine rows), one DeepGEMM read-once kernel in
two grid processes by 0.80-1.20x (docs/results/paged_mqa_two_slots_h200.json), while memory-bound calls repeat
within 3%. Compute-bound work follows the SM clock, which the GPU lowers under power and heat; this records the
clock beside each timed run so that a row shows it, or rules it out. Where nvidia-smi is missing (a CPU machine)
or fails, nothing is recorded (``summary`` stays None).

    with ClockSampler() as clocks:
        timed_work()
    clocks.summary  # {"samples", "sm_mhz": {median, min, max}, "mem_mhz", "temperature_c_max", "power_w", ...}
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile

FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "clocks_event_reasons.active")
NO_REASON = 0


def default_gpu() -> str:
    """The GPU the run's CUDA device 0 is: the first of CUDA_VISIBLE_DEVICES when it names an index."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return first if first.isdigit() else "0"


class ClockSampler:
    def __init__(self, interval_ms: int = 100, gpu: str | None = None, nvidia_smi: str = "nvidia-smi"):
        self.command = [
            nvidia_smi,
            f"--query-gpu={','.join(FIELDS)}",
            "--format=csv,noheader,nounits",
            f"-lms={interval_ms}",
            f"-i={gpu or default_gpu()}",
        ]
        self.summary: dict | None = None
        self._proc = self._out = None

    def __enter__(self) -> ClockSampler:
        # a file, not a pipe: a long run's samples would fill a pipe and stop the sampling
        self._out = tempfile.TemporaryFile(mode="w+")
        try:
            self._proc = subprocess.Popen(self.command, stdout=self._out, stderr=subprocess.DEVNULL)
        except OSError:
            self._proc = None
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._out.seek(0)
            self.summary = summarize(self._out.read().splitlines())
        self._out.close()


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _reason(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def summarize(lines: list[str]) -> dict | None:
    """The samples' SM clock (median, min, max), memory clock and power (medians), hottest temperature, and
    the clock event reasons seen (nvidia-smi's bit mask, as hex; the idle bit included); None without samples."""
    samples = [[cell.strip() for cell in line.split(",")] for line in lines]
    samples = [s for s in samples if len(s) == len(FIELDS) and _number(s[0]) is not None]
    if not samples:
        return None
    column = {name: [_number(s[i]) for s in samples] for i, name in enumerate(FIELDS[:4])}
    sm = column["clocks.sm"]

    def median(name):
        values = [v for v in column[name] if v is not None]
        return statistics.median(values) if values else None

    temperatures = [v for v in column["temperature.gpu"] if v is not None]
    reasons = {_reason(s[4]) for s in samples} - {None, NO_REASON}
    return {
        "samples": len(samples),
        "sm_mhz": {"median": statistics.median(sm), "min": min(sm), "max": max(sm)},
        "mem_mhz": median("clocks.mem"),
        "temperature_c_max": max(temperatures) if temperatures else None,
        "power_w": median("power.draw"),
        "event_reasons": sorted(f"{r:#x}" for r in reasons),
    }
