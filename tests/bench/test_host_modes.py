"""bench/studies/host_modes.py on a hand-made engine archive: runs split where time jumps, each
run's mode from its draft loop, and the ratios within a mode that the mode mix does not move."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import host_modes  # noqa: E402
from testing.probe_archives import steps_archive  # noqa: E402


def _run(t0: float, draft_ms: float, step_ms: float, steps: int = 24) -> list[dict]:
    records = []
    for i in range(steps):
        t = t0 + i * step_ms / 1000.0
        records.append({"t": t, "part": "step", "batch_size": 32, "host_ms": 4.0, "gpu_ms": step_ms})
        records.append({"t": t, "part": "draft", "batch_size": 32, "host_ms": 1.2, "gpu_ms": draft_ms})
    return records


def _archive(tmp_path: Path, engines: dict[str, list[dict]]) -> str:
    return steps_archive(tmp_path / "engines.tar.gz", engines)


def test_modes_are_counted_and_compared_within_themselves(tmp_path):
    def engine(modes, fast_step, slow_step, greedy_at):
        records = []
        for k, fast in enumerate(modes):
            records += _run(10.0 * k, 1.85 if fast else 3.0, fast_step if fast else slow_step)
        return records + _run(greedy_at, 3.0, 9.0, steps=60)  # the greedy run, left out

    archive = _archive(
        tmp_path,
        {
            "pristine": engine([True, True, False, False], 6.8, 8.0, 100.0),
            "patched": engine([True, False, False, False], 6.6, 7.8, 200.0),
        },
    )
    (result,) = host_modes.study(archive, 32, skip=2, min_steps=20, fast_below=2.0, reps=4)
    pristine, patched = result["engines"]["pristine"], result["engines"]["patched"]
    assert (pristine["fast_runs"], pristine["slow_runs"]) == (2, 2)
    assert (patched["fast_runs"], patched["slow_runs"]) == (1, 3)
    # the medians over all runs would favour pristine (more fast runs); within each mode patched is faster
    ratios = result["within_mode_ratios"]["patched"]
    assert ratios["fast"]["step_gpu_ms"] == pytest.approx(6.8 / 6.6)
    assert ratios["slow"]["step_interval_ms"] == pytest.approx(8.0 / 7.8)
    host_modes.print_study(result)


def test_two_cases_at_one_batch_size_are_told_apart(tmp_path):
    records = []
    for case, draft in enumerate((1.85, 3.0)):
        for k in range(3):  # two timed runs, then the greedy one
            records += _run(100.0 * case + 10.0 * k, draft if k < 2 else 9.0, 7.0)
    archive = _archive(tmp_path, {"pristine": records})
    first, second = host_modes.study(archive, 32, skip=2, min_steps=20, fast_below=2.0, reps=2)
    assert (first["engines"]["pristine"]["fast_runs"], first["engines"]["pristine"]["slow_runs"]) == (2, 0)
    assert second["engines"]["pristine"]["slow_runs"] == 2


def test_runs_in_time_order_and_by_core_group(tmp_path, capsys):
    # two engines taking turns; the box is slow for the middle two runs of each, whichever engine runs
    def engine(offset, modes):
        return [r for k, fast in enumerate(modes) for r in _run(20.0 * k + offset, 1.85 if fast else 3.0, 7.0)]

    archive = _archive(
        tmp_path,
        {"pristine": engine(0.0, [True, False, False, True]), "patched": engine(10.0, [True, False, False, True])},
    )
    (result,) = host_modes.study(archive, 32, skip=2, min_steps=20, fast_below=2.0, reps=4)
    in_time = result["in_time"]
    assert in_time["order"] == "pristine:F patched:F pristine:S patched:S pristine:S patched:S pristine:F patched:F"
    assert (in_time["pairs"], in_time["same_mode"]) == (7, pytest.approx(5 / 7))
    assert in_time["same_mode_if_independent"] == pytest.approx(0.5)

    engine_json = tmp_path / "engine.json"
    rows = [{"batch_size": 32, "pristine": {"cpus_runs": [[0, 1], [5, 6], [0, 1], [5, 6]]}, "patched": {}}]
    engine_json.write_text(json.dumps({"rows": rows}))
    (cpus_runs,) = host_modes.cpus_runs_of(str(engine_json), 32)
    assert host_modes.modes_by_cores(result, cpus_runs) == {
        "pristine": {"cpu0": "1 of 2 fast, draft host 1.00x", "cpu5": "1 of 2 fast, draft host 1.00x"}
    }
    result["by_cores"] = host_modes.modes_by_cores(result, cpus_runs)
    host_modes.print_study(result)
    out = capsys.readouterr().out
    assert (
        "draft loop host time, mean of the timed runs: pristine 1.200 ms, patched 1.200 ms (1.000x pristine's)" in out
    )
    assert "pristine by core group: cpu0 1 of 2 fast, draft host 1.00x, cpu5 1 of 2 fast, draft host 1.00x" in out


def test_a_second_processs_draft_host_time_against_the_firsts_with_its_interval(tmp_path, capsys):
    # the same code at a host speed of the process's own: pristine_b's draft loop 10% slower in every run
    def engine(offset, hosts):
        runs = [_run(20.0 * k + offset, 3.0, 7.0) for k in range(len(hosts))]
        return [
            {**r, "host_ms": host} if r["part"] == "draft" else r
            for run, host in zip(runs, hosts, strict=True)
            for r in run
        ]

    first, second = [1.0, 1.2, 1.1, 0.9], [1.1, 1.32, 1.21, 0.99]
    archive = _archive(tmp_path, {"pristine": engine(0.0, first), "pristine_b": engine(10.0, second)})
    (result,) = host_modes.study(archive, 32, skip=2, min_steps=20, fast_below=2.0, reps=4)
    found = host_modes.draft_host_intervals(result)["pristine_b"]
    assert found == host_modes.ratio_interval(second, first)
    assert found["ratio"] == pytest.approx(1.1) and found["ci95"][0] < 1.1 < found["ci95"][1]
    host_modes.print_study(result)
    out = capsys.readouterr().out
    low, high = found["ci95"]
    assert (
        f"pristine_b 1.100x [{low:.3f}-{high:.3f}] ({found['run_cv'][0]:.3f} / {found['run_cv'][1]:.3f}, 4 runs" in out
    )


def test_a_runs_step_interval_against_its_hosts_speed_and_the_time_on_a_cpu(tmp_path):
    # each run's host speed scales its draft loop's host time and its step interval alike; the last timed
    # run and the greedy run follow each other 0.2 s apart, as in the drafts grid
    def run(t0, speed, steps=24):
        records = []
        for i in range(steps):
            t = t0 + i * 0.007 * speed
            records.append(
                {
                    "t": t,
                    "part": "step",
                    "batch_size": 16,
                    "host_ms": 5.0 * speed,
                    "gpu_ms": 6.0,
                    "cpu_ms": 4.0 * speed,
                    "cpu": i % 2,
                }
            )
            records.append({"t": t, "part": "draft", "batch_size": 16, "host_ms": 1.0 * speed, "gpu_ms": 1.8})
        return records

    speeds = [1.0, 1.4, 0.8]
    records = [r for k, speed in enumerate(speeds) for r in run(10.0 * k, speed)]
    last = records[-1]["t"]
    records += run(last + 0.2, 1.0, steps=60)  # the greedy run
    archive = _archive(tmp_path, {"pristine": records})

    (merged,) = host_modes.study(archive, 16, skip=2, min_steps=20, fast_below=2.0, reps=3)
    assert len(merged["engines"]["pristine"]["runs"]) == 3  # the greedy run glued to the third timed one
    (result,) = host_modes.study(archive, 16, skip=2, min_steps=20, fast_below=2.0, reps=3, gap_s=0.15)
    runs = result["engines"]["pristine"]["runs"]
    assert [r["draft_host_ms"] for r in runs] == pytest.approx(speeds)
    assert all(r["on_cpu_share"] == pytest.approx(0.8) and r["cpus"] == [0, 1] for r in runs)
    link = host_modes.host_speed_link([result], ("pristine",))
    assert link["runs"] == 3 and link["correlation"] == pytest.approx(1.0)
    mean = sum(speeds) / 3
    assert link["step_interval_spread"] == pytest.approx([0.8 / mean, 1.4 / mean])
    host_modes.print_study(result)


def test_whether_each_run_draws_its_own_host_speed(tmp_path):
    def run(t0, speed, steps=24, late_speed=None):
        """A run at one host speed; with ``late_speed`` its steps after the fourth at another."""
        records = []
        for i in range(steps):
            s = speed if late_speed is None or i < 2 + 4 else late_speed  # two steps skipped, then four
            t = t0 + i * 0.007 * s
            records.append({"t": t, "part": "step", "batch_size": 16, "host_ms": 5.0 * s, "gpu_ms": 6.0})
            records.append({"t": t, "part": "draft", "batch_size": 16, "host_ms": 1.0 * s, "gpu_ms": 1.8})
        return records

    def draws(tmp, speeds_a, speeds_b):
        """Two engines taking turns, each run 1 s after the other engine's."""
        tmp.mkdir()
        engines = {"pristine": [], "pristine_b": []}
        for k, (a, b) in enumerate(zip(speeds_a, speeds_b, strict=True)):
            engines["pristine"] += run(2.0 * k, a)
            engines["pristine_b"] += run(2.0 * k + 1.0, b)
        (result,) = host_modes.study(_archive(tmp, engines), 16, skip=2, min_steps=20, fast_below=2.0, reps=4)
        return host_modes.host_speed_draws([result])

    # a slow spell of the whole box slows the runs of both engines next to each other in time
    spell = draws(tmp_path / "spell", [1.0, 1.4, 1.4, 0.7], [1.0, 1.4, 1.4, 0.7])
    assert spell["neighbour_pairs"] == 7 and spell["neighbour_start_gap_s"] == pytest.approx(1.0)
    assert spell["neighbour_draft_host_correlation"] == pytest.approx(0.459, abs=0.01)
    # each run drawing its own speed: its neighbour of the other engine does not follow it
    own = draws(tmp_path / "own", [1.0, 1.3, 0.8, 1.2], [1.2, 0.8, 1.3, 1.0])
    assert abs(own["neighbour_draft_host_correlation"]) < 0.05
    # a run whose speed changes after its first four timed steps spreads less over all its steps
    (tmp_path / "changing").mkdir()
    changing = {"pristine": [r for k, v in enumerate((1.4, 0.6, 1.0)) for r in run(2.0 * k, v, late_speed=1.0)]}
    (result,) = host_modes.study(_archive(tmp_path / "changing", changing), 16, 2, 20, 2.0, reps=3)
    sd = host_modes.host_speed_draws([result], ("pristine",)) or {}
    assert sd == {}  # one engine: no neighbours of another engine to set beside
    result["engines"]["pristine_b"] = result["engines"]["pristine"]
    sd = host_modes.host_speed_draws([result])["pristine_step_interval_sd"]
    assert sd["4"] > 0.25 > 0.1 > sd["all"]


def test_a_slow_run_is_told_from_steal_and_from_waiting_by_the_rows_host_runs(tmp_path):
    def host_run(draft_ms, steal, on_cpu, canary_ms=None):
        canary = {"median_ms": canary_ms} if canary_ms else None
        return {
            "draft_host_ms": draft_ms,
            "step_on_cpu_share": on_cpu,
            "host_cpus": {"ticks": 100, "steal_share": steal, "cpu_canary": canary},
        }

    # the second process's runs are the row's own key; the slow runs (1.3 ms) are stolen from, not waiting
    rows = [
        {
            "pristine": {"host_runs": [host_run(1.0, 0.0, 0.98), host_run(1.3, 0.2, 0.98)]},
            "host_runs_pristine_b": [host_run(1.0, 0.01, 0.97), host_run(1.3, 0.19, 0.99)],
            "patched": {"host_runs": [host_run(0.6, 0.0, 0.96)]},  # one run: no mean to be taken relative to
        }
    ]
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"rows": rows}))
    causes = host_modes.host_causes(str(path))
    assert causes["runs"] == 4 and causes["engines"] == ["pristine", "pristine_b"]
    assert causes["steal_share"] == [0.0, 0.2] and causes["on_cpu_share"] == [0.97, 0.99]
    assert causes["correlation_with_steal"] > 0.99
    assert causes["canary_spread"] is None and causes["correlation_with_canary"] is None  # runs without one
    # a canary on another vCPU that slows with the engine's runs: the whole box slowed
    rows[0]["pristine"]["host_runs"] = [host_run(1.0, 0.0, 0.98, 1.0), host_run(1.3, 0.0, 0.98, 1.25)]
    rows[0]["host_runs_pristine_b"] = [host_run(1.0, 0.0, 0.97, 2.0), host_run(1.3, 0.0, 0.99, 2.6)]
    path.write_text(json.dumps({"rows": rows}))
    causes = host_modes.host_causes(str(path))
    assert causes["correlation_with_canary"] > 0.99 and causes["canary_spread"][1] > 1.1


def test_whether_the_vcpu_a_run_ran_on_sets_its_speed(tmp_path):
    def run(t0, speed, vcpu):
        records = []
        for i in range(24):
            t = t0 + i * 0.007 * speed
            step = {"t": t, "part": "step", "batch_size": 16, "host_ms": 5.0 * speed, "gpu_ms": 6.0}
            records.append({**step, "cpu_ms": 4.9 * speed, "cpu": vcpu})
            records.append({"t": t, "part": "draft", "batch_size": 16, "host_ms": 1.0 * speed, "gpu_ms": 1.8})
        return records

    def by_vcpu(tmp, speed_of):
        """Eight runs of one engine on vCPUs 0-3 in turn, each at the speed ``speed_of(k, vcpu)``."""
        tmp.mkdir()
        records = [r for k in range(8) for r in run(2.0 * k, speed_of(k, k % 4), k % 4)]
        (result,) = host_modes.study(_archive(tmp, {"pristine": records}), 16, 2, 20, 2.0, reps=8)
        return host_modes.speed_by_vcpu([result])

    slow_cores = by_vcpu(tmp_path / "cores", lambda k, vcpu: (0.8, 1.0, 1.2, 1.0)[vcpu])
    assert slow_cores["between_share"] == pytest.approx(1.0) and slow_cores["p_value"] < 0.05
    assert slow_cores["runs"] == 8 and slow_cores["vcpus"] == 4
    drawn = by_vcpu(tmp_path / "drawn", lambda k, vcpu: (0.8, 1.2, 1.0, 1.1, 1.2, 0.8, 1.1, 1.0)[k])
    assert drawn["between_share"] < 0.5 and drawn["p_value"] > 0.3
    assert drawn["busiest_spread"] == pytest.approx([0.8 / 1.025, 1.2 / 1.025])


def test_a_floor_at_one_host_speed_takes_its_slope_from_the_other_calls(tmp_path, capsys):
    def run(t0, speed, step_follows=True):
        """A run whose host speed scales its draft loop and (unless not `step_follows`) its step interval alike."""
        records = []
        for i in range(24):
            t = t0 + i * 0.007 * (speed if step_follows else 1.0)
            records.append({"t": t, "part": "step", "batch_size": 16, "host_ms": 5.0 * speed, "gpu_ms": 6.0})
            records.append({"t": t, "part": "draft", "batch_size": 16, "host_ms": 1.0 * speed, "gpu_ms": 1.8})
        return records

    def call(name, speeds_a, speeds_b):
        (tmp_path / name).mkdir()
        engines = {
            "pristine": [r for k, v in enumerate(speeds_a) for r in run(2.0 * k, v)],
            "pristine_b": [r for k, v in enumerate(speeds_b) for r in run(2.0 * k + 1.0, v)],
            # other code, whose step does not lean on the host: it must not set the pristine pair's slope
            "patched": [r for k, v in enumerate([1.5, 0.7, 1.1]) for r in run(2.0 * k + 1.5, v, step_follows=False)],
        }
        return host_modes.study(_archive(tmp_path / name, engines), 16, 2, 20, 2.0, reps=3)

    # the same engine in two processes, whose runs drew other host speeds: raw floors off, none at one speed
    results = call("one", [1.0, 1.3, 1.2], [0.8, 0.9, 1.0]) + call("two", [0.9, 0.8, 1.0], [1.2, 1.3, 1.1])
    assert host_modes.host_adjusted_floors(results[:1]) == []  # one call: no other to fit the slope on
    floors = host_modes.host_adjusted_floors(results)
    assert [f["slope"] for f in floors] == pytest.approx([1.0, 1.0])
    assert floors[0]["raw"] == pytest.approx((1.0 * 1.3 * 1.2 / (0.8 * 0.9 * 1.0)) ** (1 / 3))
    assert [f["adjusted"] for f in floors] == pytest.approx([1.0, 1.0])
    host_modes.print_study(results[0])
    assert "over the runs): pristine 1.00, pristine_b 1.00, patched 0.00" in capsys.readouterr().out
    # at one host speed nothing is left to spread the runs: the interval closes on 1; the raw one does not
    assert floors[0]["adjusted_interval"]["ci95"] == pytest.approx([1.0, 1.0])
    low, high = floors[0]["raw_interval"]["ci95"]
    assert low < floors[0]["raw_interval"]["ratio"] < high and high - low > 0.1


def test_each_archive_takes_its_own_count_of_timed_runs(tmp_path, capsys):
    """Two calls that a deadline stopped after different numbers of rounds: each is cut by its own count,
    so neither greedy run is taken for a timed one."""

    def call(name, timed):
        (tmp_path / name).mkdir()
        records = [r for k in range(timed) for r in _run(10.0 * k, 3.0, 8.0)] + _run(1000.0, 3.0, 20.0, steps=60)
        return _archive(tmp_path / name, {"pristine": records, "pristine_b": records})

    short, long_ = call("short", 2), call("long", 5)
    out = tmp_path / "out.json"
    assert host_modes.main([short, long_, "--reps", "2,5", "--json", str(out)]) == 0
    capsys.readouterr()
    runs = [len(r["engines"]["pristine"]["runs"]) for r in json.loads(out.read_text())]
    assert runs == [2, 5]
    with pytest.raises(SystemExit) as stop:
        host_modes.main([short, long_, "--reps", "2,5,3"])
    assert stop.value.code == 2


def _paused_call(tmp_path: Path, windows: bool) -> str:
    """A call's archive and JSON beside it: pristine's three timed runs (draft host 1.2, 1.5, 1.8 ms) and a
    greedy one; the host paused for 0.5 s after the first run's fourth step."""
    records, host_runs = [], []
    for k, host_ms in enumerate((1.2, 1.5, 1.8, 3.0)):
        t0 = t = 10.0 * k
        for i in range(48 if k == 3 else 24):
            t += 0.5 if (k, i) == (0, 4) else 0.007
            records.append({"t": t, "part": "step", "batch_size": 32, "host_ms": 4.0, "gpu_ms": 7.0})
            records.append({"t": t, "part": "draft", "batch_size": 32, "host_ms": host_ms, "gpu_ms": 3.0})
        if k < 3:
            host_runs.append({"draft_host_ms": host_ms, "window": [t0, t + 0.001] if windows else None})
    (tmp_path / "call.json").write_text(
        json.dumps({"rows": [{"batch_size": 32, "pristine": {"host_runs": host_runs}}]})
    )
    archive = Path(_archive(tmp_path, {"pristine": records}))
    return str(archive.rename(tmp_path / "call_engines.tar.gz"))


def test_a_run_the_host_paused_in_is_not_taken_for_two_and_the_driver_says_which_runs_it_timed(tmp_path, capsys):
    archive = _paused_call(tmp_path, windows=False)
    # cut where the records pause, the first run's 20 steps after the pause fall below --min-steps and the
    # greedy run is taken for the third: the driver's own record of each run refuses it
    with pytest.raises(LookupError, match="timed run 1: draft host 1.5000 ms as cut here, 1.2000 ms"):
        host_modes.study(archive, 32, skip=2, min_steps=20, fast_below=2.0, reps=3)
    assert host_modes.main(["--reps", "3", "--min-steps", "20", archive]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (result,) = host_modes.study(archive, 32, skip=2, min_steps=18, fast_below=2.0, reps=3)
    assert [r["draft_host_ms"] for r in result["engines"]["pristine"]["runs"]] == [1.2, 1.5, 1.8]
    assert "checked against call.json" in result["source"]


def test_runs_are_cut_by_the_drivers_windows_where_its_json_has_them(tmp_path):
    archive = _paused_call(tmp_path / "", windows=True)
    (result,) = host_modes.study(archive, 32, skip=2, min_steps=20, fast_below=2.0, reps=3)
    runs = result["engines"]["pristine"]["runs"]
    assert [r["draft_host_ms"] for r in runs] == [1.2, 1.5, 1.8] and runs[0]["timed_steps"] == 22
    assert result["source"] == "the driver's windows, from call.json"
