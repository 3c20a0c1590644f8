"""bench/studies/floor_measures.py on a hand-made floor call: each run's verify forwards in the archive, its
window, first token and prompt time in the JSON's row. Two pristine processes of one speed give floors that hold
1; a patched engine twice as fast an A/B of 2; the old tokens/s window's count and a run's pieces of time come out
as made."""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import floor_measures  # noqa: E402
from testing.probe_archives import FLOOR_ROUNDS, FLOOR_STEPS, floor_call  # noqa: E402

LABELS = ("pristine", "pristine_b", "patched")
ROUNDS, STEPS = FLOOR_ROUNDS, FLOOR_STEPS


def test_floors_hold_one_the_ab_is_the_speed_and_every_run_is_checked_against_the_row(tmp_path):
    call = floor_measures.load(floor_call(tmp_path, {"pristine": 16.0, "pristine_b": 16.0, "patched": 8.0}))
    assert {label: len(runs) for label, runs in call["runs"].items()} == dict.fromkeys(LABELS, ROUNDS)
    assert call["against_row"]["pristine"] == {"runs": ROUNDS, "differ": 0, "most": pytest.approx(0.0, abs=1e-9)}
    rng = random.Random(0)
    floor = floor_measures.measures(call, "pristine", "pristine_b", 200, rng)
    names = {m["measure"] for m in floor}
    assert "step gaps' p99, pooled" in names and "tokens/s over the timed steps, pooled" in names
    assert not any(m["measure"] == "TPOT" for m in floor)  # the second process's TPOT is not in the row
    for m in floor:
        assert m["ci95"][0] < 1.0 < m["ci95"][1], m
    ab = floor_measures.measures(call, "pristine", "patched", 200, rng)
    for m in ab:
        if "step" in m["measure"] or m["measure"] == "TPOT":
            assert m["ratio"] == pytest.approx(2.0, rel=0.1), m
    # the rate over the run's wall time counts its fixed time too, so it gains less than the step
    wall = next(m for m in ab if m["measure"] == "tokens/s over the run's wall time")
    assert 1.1 < wall["ratio"] < 1.6


def test_a_row_whose_runs_are_not_these_is_refused(tmp_path):
    with pytest.raises(LookupError):
        floor_measures.load(floor_call(tmp_path, {"pristine": 16.0, "pristine_b": 16.0, "patched": 8.0}, 1.1))


def test_the_old_windows_count_and_a_runs_pieces_of_time(tmp_path):
    call = floor_measures.load(floor_call(tmp_path, {"pristine": 20.0, "pristine_b": 20.0, "patched": 10.0}))
    old = floor_measures.old_window(call)["pristine"]
    # from the first token the batch's first verify forward is 0.1 s away; 0.2 s holds about 5 at 20 ms
    assert old["first_token_to_first_verify_s"]["median"] == pytest.approx(0.1)
    assert 4 <= old["verify_in_window"]["median"] <= 6 and old["tokens_counted"] == pytest.approx(200.0)
    pieces = floor_measures.fixed_time(call)["pristine"]
    assert pieces["to first token"]["median"] == pytest.approx(0.15)
    assert pieces["after last verify"]["median"] == pytest.approx(0.04)
    assert pieces["to next run"]["median"] == pytest.approx(0.2)
    assert pieces["decode"]["median"] == pytest.approx(0.02 * (STEPS - 1), rel=0.15)
    assert floor_measures.round_s(call) == pytest.approx(
        statistics.fmean(
            b - a for a, b in zip(*[[r["t_start"] for r in call["runs"]["pristine"]][i:] for i in (0, 1)], strict=False)
        )
    )
    assert floor_measures.vcpus(call)["pristine"]["one_vcpu"] == 1.0


def test_steps_in_a_window_are_spread_over_their_gaps():
    starts = [0.0, 0.01, 0.02, 0.04]
    assert floor_measures.steps_at(starts, 0.015) == pytest.approx(1.5)
    assert floor_measures.steps_at(starts, 0.03) == pytest.approx(2.5)
    assert floor_measures.steps_at(starts, 0.0) == 0.0 and floor_measures.steps_at(starts, -1.0) == 0.0
    assert floor_measures.steps_at(starts, 0.04) == 3.0 and floor_measures.steps_at(starts, 0.05) == 3.0
    assert floor_measures.steps_per_s_window({"starts": starts}, 0.015) == pytest.approx(100.0)


def test_an_aa_only_call_gives_its_floor_and_a_call_without_two_pristine_processes_is_refused(tmp_path, capsys):
    aa = floor_call(tmp_path, {"pristine": 16.0, "patched": 16.0}, name="aa", patched_is_pristine=True)
    assert floor_measures.main([str(aa), "--boots", "100"]) == 0
    out = capsys.readouterr().out
    assert "== floor: patched against pristine" in out and "== A/B" not in out and "a round of the two engines" in out
    assert "  TPOT: " in out  # both processes' TPOT runs are in an --aa-only call's row
    ab = floor_call(tmp_path, {"pristine": 16.0, "patched": 8.0}, name="ab")
    assert floor_measures.main([str(ab)]) == 2
    assert capsys.readouterr().err == (
        "floor_measures: ab.json: no two pristine processes (no host_runs_pristine_b, not patched_is_pristine)\n"
    )


def test_a_row_without_a_window_prints_that_it_has_none(capsys):
    """rows.fixed_window_s gives None where no run had every request decoding at once (no streaming span)."""
    row = {"window_s": None, "window_from": "every request decoding", "window_short_runs": {"pristine": 3}}
    floor_measures.print_window(row)
    assert "no window (no run had every request decoding at once)" in capsys.readouterr().out
