"""bench/studies/floor_design.py on a hand-made engine archive: each run's host speed drawn once and held through
it, so the study must find the speed held within runs, fit the draw as the model's run variance, find a pause
inside a run, and give the floor an interval that holds 1."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import floor_design  # noqa: E402
from testing.probe_archives import steps_archive  # noqa: E402

ENGINES = ("pristine", "pristine_b", "patched")
STEPS = 17  # step records a run (48 tokens at 3 a step, as the H100 floor calls)
ROUNDS = 30


def _run(t0: float, speed: float, vcpu: int, rng: random.Random, pause_after: int | None = None) -> list[dict]:
    """One run's step and draft records: every step at 10 ms x ``speed``, 2% noise a step."""
    records, t = [], t0
    for i in range(STEPS):
        step_ms = 10.0 * speed * math.exp(rng.gauss(0.0, 0.02))
        for part, host in (("step", step_ms), ("draft", 1.2 * speed)):
            records.append(
                {"t": t, "part": part, "batch_size": 32, "host_ms": host, "cpu_ms": host, "cpu": vcpu, "gpu_ms": host}
            )
        t += step_ms / 1000.0 + (0.4 if pause_after is not None and i == pause_after else 0.0)
    return records


def _archive(tmp_path: Path, pause: bool = False) -> str:
    rng = random.Random(1)
    engines: dict[str, list[dict]] = {label: [] for label in ENGINES}
    t = 1000.0
    for rnd in range(ROUNDS + 1):  # the last round is the greedy one
        for k, label in enumerate(ENGINES):
            speed = math.exp(rng.gauss(0.0, 0.15))
            first = pause and rnd == 0 and label == "pristine"
            engines[label] += _run(t, speed, vcpu=(k + rnd) % 3, rng=rng, pause_after=0 if first else None)
            t += 0.9  # start to start, away from the gap bins' edges (a run's first timed step moves with its speed)
    return steps_archive(tmp_path / "call_engines.tar.gz", engines)


def test_a_speed_drawn_per_run_is_held_within_runs_and_fitted_as_the_draw(tmp_path):
    call = floor_design.load_call(_archive(tmp_path), ROUNDS, 14, 32)
    assert {label: len(runs) for label, runs in call["runs"].items()} == dict.fromkeys(ENGINES, ROUNDS)
    within = floor_design.within_run(floor_design.pair_series(call))
    assert within["quarters_first_last"] > 0.95  # the speed is held through the run
    assert within["sd_step_in_run"] < 0.03 < 0.1 < within["sd_run_mean"]
    model = floor_design.fit_model(floor_design.pair_series(call))
    run_sd = math.sqrt(floor_design.run_mean_var(model, 14))
    assert run_sd == pytest.approx(within["sd_run_mean"], rel=0.1)
    # runs of two engines, each its own draw, do not correlate by their gap beyond chance
    assert all(abs(g["correlation"]) < 0.6 for g in floor_design.by_gap(call, shuffles=20) if g["pairs"] >= 20)


def test_a_pause_inside_a_run_is_found_and_the_speed_after_it_placed(tmp_path):
    call = floor_design.load_call(_archive(tmp_path, pause=True), ROUNDS, 14, 32)
    found = floor_design.pauses(call)
    assert [(p["engine"], p["steps_before"]) for p in found] == [("pristine", 1)]
    assert 390 < found[0]["pause_ms"] < 450 and 1 <= found[0]["rank_after"] <= ROUNDS


def test_designs_and_measures_give_intervals_that_hold_one(tmp_path):
    call = floor_design.load_call(_archive(tmp_path), ROUNDS, 14, 32)
    model = floor_design.fit_model(floor_design.pair_series(call))
    model["step_ms"] = 10.0
    cost = floor_design.run_cost(call)
    assert 0.8 < cost["per_run_s"] < 1.0 and cost["overhead_s"] > 0.6
    short, long = (floor_design.design(model, cost, 300.0, n, 3) for n in (12, 48))
    assert short["runs"] > long["runs"] and short["timed_intervals"] == 2 and long["timed_intervals"] == 14
    rng = random.Random(0)
    widths = floor_design.resampled_design(call, long, 50, rng)
    assert set(widths) == set(floor_design.RESAMPLED) and all(0 < w < 0.2 for w in widths.values())
    assert floor_design.resampled_design(call, floor_design.design(model, cost, 300.0, 96, 3), 5, rng) is None
    assert 0 < floor_design.expected_half_width(long, model, 0.2, None, "paired", 30, rng) < 0.2
    assert floor_design.expected_half_width(long, model, 0.0, None, "tpot", 30, rng) is None  # no TPOT per run
    measures = floor_design.user_measures(call, 100, rng)
    assert all(m["ci95"][0] <= m["ratio"] <= m["ci95"][1] for m in measures)
    assert any(m["ci95"][0] < 1 < m["ci95"][1] for m in measures)


def test_main_prints_every_part(tmp_path, capsys):
    archive = _archive(tmp_path)
    assert floor_design.main([f"{archive}:{ROUNDS}:14:32", "--sims", "10", "--shuffles", "10", "--boots", "20"]) == 0
    out = capsys.readouterr().out
    for part in ("within a run", "between runs", "== model", "== designs", "== measures users read"):
        assert part in out
