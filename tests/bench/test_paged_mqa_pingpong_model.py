"""bench/studies/paged_mqa_pingpong_model.py: the candidate's barrier protocol runs clean in random schedules,
and each planted mistake is caught by some of the same schedules (a model that catches nothing proves nothing)."""

from __future__ import annotations

import pytest

from bench.studies import paged_mqa_pingpong_model as model

SCHEDULES = 400


def test_the_candidate_protocol_runs_every_schedule_clean():
    n, failures = model.sweep(SCHEDULES)
    assert n == SCHEDULES and failures == []


@pytest.mark.parametrize("mutant", sorted(model.MUTANTS))
def test_each_planted_mistake_is_caught(mutant):
    _, caught = model.sweep(SCHEDULES, mutant)
    assert caught, f"{mutant} ({model.MUTANTS[mutant]}) went unnoticed in {SCHEDULES} schedules"


def test_odd_next_n_gives_the_last_group_one_token_and_it_takes_part():
    # next_n 5: three warp-groups, the last with one token; every (task, group) computed once
    # (five requests: the fourth Q load waits for the first request's stage, which every group must release)
    tasks = [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0), (4, 1)]
    for seed in range(50):
        assert model.run(tasks, (5, 0), 5, seed) == "ok"
    assert all(model.run(tasks, (5, 0), 5, s, "single_token_no_q_release").startswith("deadlock") for s in range(50))
