"""bench/studies/process_layout.py: a worker's own speed told from the rounds' drift, and the three ways of
starting workers."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.engine import processes  # noqa: E402
from bench.studies import process_layout  # noqa: E402


def _blocks(own: list[float], rounds: int, noise: float, seed: int) -> tuple[list[list[float]], list[float]]:
    """Log block times of workers whose own speeds are `own`, every round slower than the one before."""
    rng = random.Random(seed)
    times = [[math.log(20.0 * s) + 0.01 * r + rng.gauss(0.0, noise) for r in range(rounds)] for s in own]
    return times, [sum(t[r] for t in times) / len(times) for r in range(rounds)]


def test_a_worker_with_a_speed_of_its_own_stands_out_and_the_rounds_drift_does_not():
    times, means = _blocks([1.0, 1.0, 1.1, 1.0], rounds=40, noise=0.02, seed=3)
    got = process_layout.summarize(times, means, shuffles=500, rng=random.Random(1))
    assert got["speeds"][2] / got["speeds"][0] == pytest.approx(1.1, rel=0.02)
    assert got["permutation_p"] < 0.01 and got["icc"] > 0.5
    same = process_layout.summarize(*_blocks([1.0] * 4, rounds=40, noise=0.02, seed=4), 500, random.Random(1))
    assert same["spread"] < 1.03 and same["icc"] < 0.1


def test_workers_run_in_each_mode_and_say_whether_their_addresses_were_fixed(tmp_path):
    out = tmp_path / "layout.json"
    argv = ["--processes", "2", "--rounds", "3", "--units", "2", "--shuffles", "10", "--json", str(out)]
    assert process_layout.main(argv) == 0
    got = json.loads(out.read_text())
    assert got["random"]["aslr"] == got["hash"]["aslr"] == [processes.aslr_state(0)]
    # off unless the kernel refuses the personality flag (a seccomp filter may)
    assert got["layout"]["aslr"] in (["off"], [processes.aslr_state(0)])
    assert all(len(got[mode]["speeds"]) == 2 for mode in process_layout.MODES)
    assert process_layout.main(["--modes", "random,other"]) == 2
