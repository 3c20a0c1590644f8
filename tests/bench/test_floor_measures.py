"""bench/studies/floor_measures.py on a hand-made floor call: each run's verify forwards in the archive, its
window, first token and prompt time in the JSON's row. Two pristine processes of one speed give floors that hold
1; a patched engine twice as fast an A/B of 2; the old tokens/s window's count and a run's pieces of time come out
as made."""

from __future__ import annotations

import io
import json
import math
import random
import statistics
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import floor_measures  # noqa: E402

LABELS = ("pristine", "pristine_b", "patched")
ROUNDS, STEPS, SKIP = 24, 17, 2


def _call(tmp_path: Path, step_ms: dict[str, float], row_step_off: float = 1.0) -> Path:
    """A floor call: every run starts, streams its first token 0.15 s later, begins its first verify forward
    0.1 s after that and one every ``step_ms`` x the run's speed (drawn per run), ends 0.04 s after its last."""
    rng = random.Random(3)
    verify: dict[str, list[dict]] = {label: [] for label in LABELS}
    host: dict[str, list[dict]] = {label: [] for label in LABELS}
    intervals: dict[str, list[float]] = {label: [] for label in LABELS}
    t = 1000.0
    for _ in range(ROUNDS):
        for label in LABELS:
            gap = step_ms[label] * math.exp(rng.gauss(0.0, 0.1)) / 1000.0
            first = t + 0.25
            starts = [first + k * gap for k in range(STEPS)]
            verify[label] += [{"t": s, "batch_size": 32, "profiled": False} for s in starts]
            end = starts[-1] + 0.04
            host[label].append(
                {"window": [t, end], "prompt_s": 0.02, "first_token_s": 0.15, "step_cpus": [len(host[label]) % 3]}
            )
            intervals[label].append(gap * 1000.0)
            t = end + 0.2
    row = {
        "batch_size": 32,
        "ctx": 65536,
        "next_n": 4,
        "new_tokens": 48,
        "window_s": 0.2,
        "aa_noise_processes": {"tokens_per_s_window": 1.0},
        "host_runs_pristine_b": host["pristine_b"],
    }
    for label in ("pristine", "patched"):
        row[label] = {
            "host_runs": host[label],
            "step_interval_ms_runs": [v * row_step_off for v in intervals[label]],
            "tpot_ms_runs": [v / 3.0 for v in intervals[label]],
            "tokens_per_s_window": 1000.0,
        }
    path = tmp_path / "call.json"
    path.write_text(json.dumps({"meta": {"skip_steps": SKIP}, "rows": [row]}))
    with tarfile.open(tmp_path / "call_engines.tar.gz", "w:gz") as tar:
        for label, records in verify.items():
            data = "\n".join(json.dumps(r) for r in records).encode()
            info = tarfile.TarInfo(f"./probe-n4-{label}/verify.jsonl")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_floors_hold_one_the_ab_is_the_speed_and_every_run_is_checked_against_the_row(tmp_path):
    call = floor_measures.load(_call(tmp_path, {"pristine": 16.0, "pristine_b": 16.0, "patched": 8.0}))
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
        floor_measures.load(_call(tmp_path, {"pristine": 16.0, "pristine_b": 16.0, "patched": 8.0}, 1.1))


def test_the_old_windows_count_and_a_runs_pieces_of_time(tmp_path):
    call = floor_measures.load(_call(tmp_path, {"pristine": 20.0, "pristine_b": 20.0, "patched": 10.0}))
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
