"""bench/gpu_clocks.py on CPU. nvidia-smi cannot run here: a stand-in script of that name prints the CSV lines
nvidia-smi's ``--query-gpu ... --format=csv,noheader,nounits --loop-ms=N`` prints, until it is stopped."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

from bench.gpu_clocks import FIELDS, ClockSampler, parse, summarize

STAND_IN = """#!/bin/sh
# stand-in for nvidia-smi: records its arguments and pid, then one sample line every 20 ms until stopped
echo "$@" > "$(dirname "$0")/args"
echo $$ > "$(dirname "$0")/pid"
i=0
while :; do
  i=$((i + 1))
  now=$(date +"%Y/%m/%d %H:%M:%S.%3N")
  if [ $i -eq 2 ]; then echo "$now, [N/A], 3201, 61, [N/A], 0x0000000000000000"; fi
  echo "$now, $((1980 - i)), 3201, $((50 + i)), 612.5, 0x0000000000000004"
  sleep 0.02
done
"""
REFUSING = """#!/bin/sh
echo 'Field "clocks_event_reasons.active" is not a valid field to query.' >&2
exit 2
"""


def stand_in(folder, text=STAND_IN):
    path = folder / "nvidia-smi"
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def line(stamp, sm, reason="0x0000000000000000", power="650.1", temperature="70"):
    return f"{stamp}, {sm}, 3201, {temperature}, {power}, {reason}"


def test_the_clock_is_sampled_while_the_work_goes_on(tmp_path):
    smi = stand_in(tmp_path)
    with ClockSampler(interval_ms=20, gpu="3", nvidia_smi=str(smi)) as clocks:
        time.sleep(0.4)
        middle = time.time()
        time.sleep(0.4)
    summary = clocks.summary
    assert summary["samples"] >= 3
    assert summary["sm_mhz"]["max"] == 1979 and summary["sm_mhz"]["min"] < 1979
    assert summary["mem_mhz"] == 3201 and summary["power_w"] == 612.5
    assert summary["event_reasons"] == ["0x4"]  # the power cap bit; a sample without a reason adds none
    later = clocks.summary_between(middle, time.time())
    assert 0 < later["samples"] < summary["samples"] and later["sm_mhz"]["max"] < 1979
    args = (tmp_path / "args").read_text().split()
    assert args == [f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "--loop-ms=20", "--id=3"]


def test_without_nvidia_smi_nothing_is_recorded(tmp_path):
    with ClockSampler(nvidia_smi=str(tmp_path / "missing")) as clocks:
        pass
    assert clocks.summary is None


def test_an_nvidia_smi_that_refuses_says_why(tmp_path):
    with ClockSampler(nvidia_smi=str(stand_in(tmp_path, REFUSING))) as clocks:
        time.sleep(0.2)
    assert clocks.summary == {
        "samples": 0,
        "error": 'Field "clocks_event_reasons.active" is not a valid field to query.',
    }


def test_the_sampler_stops_with_the_process_that_started_it(tmp_path):
    """A grid stopped by a signal never reaches the sampler's __exit__: nvidia-smi must not outlive it."""
    smi = stand_in(tmp_path)
    code = (
        "import os, time; from bench.gpu_clocks import ClockSampler\n"
        f"ClockSampler(nvidia_smi={str(smi)!r}).__enter__(); time.sleep(0.3); os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd(), timeout=30)
    pid = int((tmp_path / "pid").read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    raise AssertionError("the stand-in nvidia-smi outlived the process that started it")


def test_lines_that_are_not_samples_are_left_out():
    assert summarize(parse([])) is None
    assert summarize(parse(["No devices were found"])) is None
    got = summarize(
        parse([line("2026/12/04 18:05:41.100", 1755), line("2026/12/04 18:05:41.120", 1680, "0x4", power="[N/A]")])
    )
    assert got["sm_mhz"] == {"median": 1717.5, "min": 1680.0, "max": 1755.0}
    assert got["temperature_c_max"] == 70 and got["power_w"] == 650.1 and got["event_reasons"] == ["0x4"]


def test_an_engine_row_carries_each_runs_clock_and_their_median():
    from bench.engine.rows import sm_mhz

    def run(median):
        return {"gpu_clocks": {"sm_mhz": {"median": median, "min": median, "max": median}}}

    assert sm_mhz([run(1700.0), run(1980.0), run(1755.0)]) == 1755.0
    assert sm_mhz([run(1700.0), {"gpu_clocks": None}, {"gpu_clocks": {"samples": 0, "error": "x"}}]) == 1700.0
    assert sm_mhz([{}, {"gpu_clocks": None}]) is None


def test_each_layout_of_the_kernel_grid_gets_the_samples_of_its_own_window():
    from bench.paged_mqa_read_once import attach_clocks

    clocks = ClockSampler()
    stamps = ["2026/12/04 18:05:41.100", "2026/12/04 18:05:41.300", "2026/12/04 18:05:42.500"]
    clocks.samples = parse([line(stamps[0], 1980), line(stamps[1], 1755), line(stamps[2], 1600)])
    at = [sample.at_s for sample in clocks.samples]
    row = {"per_token_window_s": [at[0] - 0.01, at[1] + 0.01]}
    row["native_window_s"] = [at[2] - 0.01, at[2] + 0.01]
    attach_clocks([row], clocks)
    assert row["per_token_gpu_clocks"]["sm_mhz"] == {"median": 1867.5, "min": 1755.0, "max": 1980.0}
    assert row["native_gpu_clocks"]["sm_mhz"]["median"] == 1600.0
