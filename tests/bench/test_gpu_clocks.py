"""bench/gpu_clocks.py on CPU. nvidia-smi cannot run here: a stand-in script of that name prints the CSV lines
nvidia-smi's ``--query-gpu ... --format=csv,noheader,nounits -lms N`` prints, until it is stopped."""

from __future__ import annotations

import stat
import time

from bench.gpu_clocks import FIELDS, ClockSampler, summarize

STAND_IN = """#!/bin/sh
# stand-in for nvidia-smi: records its arguments, then one sample line every 20 ms until stopped
echo "$@" > "$(dirname "$0")/args"
i=0
while :; do
  i=$((i + 1))
  if [ $i -eq 2 ]; then echo "[N/A], 3201, 61, [N/A], 0x0000000000000000"; fi
  echo "$((1980 - i)), 3201, $((50 + i)), 612.5, 0x0000000000000004"
  sleep 0.02
done
"""


def stand_in_nvidia_smi(folder):
    path = folder / "nvidia-smi"
    path.write_text(STAND_IN)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_clock_is_sampled_while_the_run_goes_on(tmp_path):
    smi = stand_in_nvidia_smi(tmp_path)
    with ClockSampler(interval_ms=20, gpu="3", nvidia_smi=str(smi)) as clocks:
        time.sleep(0.3)
    summary = clocks.summary
    assert summary["samples"] >= 3
    assert summary["sm_mhz"]["max"] == 1979 and summary["sm_mhz"]["min"] < 1979
    assert summary["sm_mhz"]["min"] <= summary["sm_mhz"]["median"] <= summary["sm_mhz"]["max"]
    assert summary["mem_mhz"] == 3201 and summary["power_w"] == 612.5
    assert summary["event_reasons"] == ["0x4"]  # the power cap bit; a sample without a reason adds none
    args = (tmp_path / "args").read_text().split()
    assert args == [f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-lms=20", "-i=3"]


def test_without_nvidia_smi_nothing_is_recorded(tmp_path):
    with ClockSampler(nvidia_smi=str(tmp_path / "missing")) as clocks:
        pass
    assert clocks.summary is None


def test_lines_that_are_not_samples_are_left_out():
    assert summarize([]) is None
    assert summarize(["No devices were found"]) is None
    got = summarize(["1755, 3201, 70, 650.1, 0x0000000000000000", "1680, 3201, 74, [N/A], 0x0000000000000004"])
    assert got["sm_mhz"] == {"median": 1717.5, "min": 1680.0, "max": 1755.0}
    assert got["temperature_c_max"] == 74 and got["power_w"] == 650.1 and got["event_reasons"] == ["0x4"]


def test_an_engine_row_carries_each_runs_clock_and_their_median():
    from bench.engine.rows import sm_mhz

    def run(median):
        return {"gpu_clocks": {"sm_mhz": {"median": median, "min": median, "max": median}}}

    assert sm_mhz([run(1700.0), run(1980.0), run(1755.0)]) == 1755.0
    assert sm_mhz([run(1700.0), {"gpu_clocks": None}]) == 1700.0
    assert sm_mhz([{}, {"gpu_clocks": None}]) is None


def test_the_kernel_grid_prints_the_clock_of_its_request_layout():
    from bench.paged_mqa_read_once import line

    row = {"heads": 64, "next_n": 3, "batch_size": 32, "ctx": 65536, "lengths": "uniform", "native_us": 107.0}
    assert "native 107.0 us;" in line(row)
    row["native_gpu_clocks"] = summarize(["1755, 3201, 70, 650.1, 0x0000000000000000"])
    assert "native 107.0 us (SM clock 1755 MHz);" in line(row)
