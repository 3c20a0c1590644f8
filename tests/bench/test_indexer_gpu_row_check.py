"""The v0.5.23 indexer GPU test's row-width check (tests/gpu/indexer_runs.py ``assert_sm90_rows_v0_5_23``) on CPU,
on the committed H200 runs of the line: the width each row took follows the line's SM90 rule with the answer
bench/indexer_step.py recorded from the tree's probe of [B, next_n] rows.

Both committed runs had DeepGEMM kernels that take at most two tokens per row (a probe would have said no);
they predate the recorded answer, which each test adds as the run would have recorded it.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))

import indexer_runs  # noqa: E402

RESULTS = REPO / "docs" / "results"
LARGE = "indexer_h200_v0_5_23_large.json"  # next_n 2-4 x 32 and 128 requests x 16k and 64k
HOLDOUT = "indexer_holdout_h200_v0_5_23_source.json"  # next_n 2-6 x 2-128 requests x 2k-128k


def run_with_answers(name: str, answer, heads: int = 64) -> dict:
    doc = json.loads((RESULTS / name).read_text())
    next_ns = sorted({r["next_n"] for r in doc["rows"]})
    answers = {str(n): (answer if n % 2 else None) for n in next_ns}
    doc["sm90_next_n_rows_probe"] = dict(function="sm90_paged_mqa_takes_next_n_rows", heads=heads, head_dim=128)
    doc["sm90_next_n_rows_probe"]["answers"] = answers
    return doc


def as_read_once(doc: dict) -> dict:
    """The run as a DeepGEMM that said yes would record it: odd next_n rows of all next_n tokens."""
    doc = copy.deepcopy(doc)
    for r in doc["rows"]:
        if r["next_n"] % 2:
            r["layout"] = "native"
            r["kernel_q_chosen"] = [r["batch_size"], r["next_n"], *r["kernel_q_chosen"][2:]]
    return doc


@pytest.mark.parametrize("name", [LARGE, HOLDOUT])
def test_the_committed_runs_follow_the_lines_rule_with_a_no(name):
    indexer_runs.assert_sm90_rows_v0_5_23(run_with_answers(name, False))


def test_one_token_rows_fail_where_deepgemm_said_yes():
    with pytest.raises(AssertionError, match="'native', 3"):
        indexer_runs.assert_sm90_rows_v0_5_23(run_with_answers(LARGE, True))


def test_read_once_rows_pass_where_deepgemm_said_yes_and_fail_where_it_said_no():
    indexer_runs.assert_sm90_rows_v0_5_23(as_read_once(run_with_answers(LARGE, True)))
    with pytest.raises(AssertionError, match="'per_token', 1"):
        indexer_runs.assert_sm90_rows_v0_5_23(as_read_once(run_with_answers(LARGE, False)))


def test_a_run_without_the_answers_or_asked_about_other_heads_fails():
    doc = run_with_answers(LARGE, False)
    doc["sm90_next_n_rows_probe"] = None
    with pytest.raises(AssertionError, match="not recorded"):
        indexer_runs.assert_sm90_rows_v0_5_23(doc)
    with pytest.raises(AssertionError, match="'heads': 1"):  # the DSA test kit's config: one index head
        indexer_runs.assert_sm90_rows_v0_5_23(run_with_answers(LARGE, True, heads=1))
