"""The GPU's clocks, temperature and power while timed work goes on, sampled by nvidia-smi in the background.

Why: the same GPU work timed in two processes has differed by more than a re-run should: the step's GPU time of
two pristine engine processes by 0.87-1.33x (v0.5.14 engine rows), one DeepGEMM kernel in two grid processes by
0.80-1.20x (docs/results/paged_mqa_two_slots_h200.json). Compute-bound work follows the SM clock, which the GPU
lowers under power and heat; this records the clock beside each timed run so that a row shows it, or rules it
out. Where nvidia-smi is missing (a CPU machine) ``summary`` stays None; where it runs and gives no sample (a
flag refused, no GPU), ``summary`` says so in ``error``.

    with ClockSampler() as clocks:
        t0 = time.time(); timed_work(); t1 = time.time()
    clocks.summary                # every sample: {"samples", "sm_mhz": {median, min, max}, "mem_mhz", ...}
    clocks.summary_between(t0, t1)  # the samples nvidia-smi took in that window (each sample is timestamped)
"""

from __future__ import annotations

import ctypes
import datetime
import os
import signal
import statistics
import subprocess
import tempfile
from typing import NamedTuple

FIELDS = ("timestamp", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "clocks_event_reasons.active")
NO_REASON = 0
PR_SET_PDEATHSIG = 1


def default_gpu() -> str:
    """The GPU the run's CUDA device 0 is, as nvidia-smi's --id takes it (an index or a UUID): the first entry
    of CUDA_VISIBLE_DEVICES, else 0. An index there counts in CUDA's order, nvidia-smi's in PCI order; they
    agree on a box of one GPU or with CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


# resolved here, not in the child between fork and exec, where loading a library could wait on a lock
_PRCTL = _libc_prctl()


def stop_with_parent() -> None:
    """In the sampler's child: stop when the thread that started it dies, even by a signal that skips its
    ``__exit__`` (a grid under ``timeout`` gets SIGTERM): no nvidia-smi left polling through later runs."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


class ClockSampler:
    def __init__(self, interval_ms: int = 100, gpu: str | None = None, nvidia_smi: str = "nvidia-smi"):
        self.command = [
            nvidia_smi,
            f"--query-gpu={','.join(FIELDS)}",
            "--format=csv,noheader,nounits",
            f"--loop-ms={interval_ms}",
            f"--id={gpu or default_gpu()}",
        ]
        self.samples: list[Sample] = []
        self.summary: dict | None = None
        self._proc = None

    def __enter__(self) -> ClockSampler:
        # files, not pipes: a long run's samples would fill a pipe and stop the sampling
        self._out, self._err = tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+")
        try:
            self._proc = subprocess.Popen(self.command, stdout=self._out, stderr=self._err, preexec_fn=stop_with_parent)
        except OSError:
            self._proc = None
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._proc is not None:
                self._stop()
                self._out.seek(0)
                self.samples = parse(self._out.read().splitlines())
                self.summary = summarize(self.samples)
                if self.summary is None:
                    self._err.seek(0)
                    why = (self._err.read().strip().splitlines() or [f"exit {self._proc.returncode}"])[0]
                    self.summary = {"samples": 0, "error": why[:200]}
        finally:
            self._out.close()
            self._err.close()

    def _stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def summary_between(self, start_s: float, end_s: float) -> dict | None:
        """The summary of the samples taken from ``start_s`` to ``end_s`` (time.time() seconds)."""
        return summarize([s for s in self.samples if start_s <= s.at_s <= end_s])


def _epoch_s(stamp: str) -> float:
    """nvidia-smi's timestamp ('2026/12/04 18:05:41.123', the machine's local time) as time.time() counts."""
    return datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()


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


class Sample(NamedTuple):
    at_s: float  # time.time() seconds
    sm_mhz: float
    mem_mhz: float | None
    temperature_c: float | None
    power_w: float | None
    reason: int | None


def parse(lines: list[str]) -> list[Sample]:
    """The lines that are samples (a timestamp and an SM clock), read once: a grid's windows filter on them."""
    samples = []
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(FIELDS) or _number(cells[1]) is None:
            continue
        try:
            at_s = _epoch_s(cells[0])
        except ValueError:
            continue
        samples.append(Sample(at_s, *map(_number, cells[1:5]), _reason(cells[5])))
    return samples


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(samples: list[Sample]) -> dict | None:
    """The samples' SM clock (median, min, max), memory clock and power (medians), hottest temperature, and
    the clock event reasons seen (nvidia-smi's bit mask, as hex); None without samples."""
    if not samples:
        return None
    sm = [s.sm_mhz for s in samples]
    temperatures = [s.temperature_c for s in samples if s.temperature_c is not None]
    reasons = {s.reason for s in samples} - {None, NO_REASON}
    return {
        "samples": len(samples),
        "sm_mhz": {"median": statistics.median(sm), "min": min(sm), "max": max(sm)},
        "mem_mhz": _median(s.mem_mhz for s in samples),
        "temperature_c_max": max(temperatures) if temperatures else None,
        "power_w": _median(s.power_w for s in samples),
        "event_reasons": sorted(f"{r:#x}" for r in reasons),
    }
